"""A command's results file as the run wrapper writes it, for the report's tests (tests/runs/)."""

from __future__ import annotations

import json
from pathlib import Path


def record(
    directory: Path,
    name: str,
    *,
    device: str,
    image: str | None,
    wall: float,
    status: int = 0,
    metrics=None,
    argv=("python", "train.py"),
    lock: str | None = "ab" * 32,
    started_at: str = "2026-11-25T22:00:00+00:00",
    series=None,
    used: dict | bool = True,
    **extra,
):
    """A results file as envkit_run.py writes it for a command that keeps no record of its own; ``extra``: the
    record's optional facts (target, data); ``used``: the run block's device (what the program initialised;
    True: the device the record names, as the wrapper sees a Python program initialise it; False: no block, as
    an older wrapper wrote)."""
    directory.mkdir(exist_ok=True)
    if used is True:
        accelerator = device if device in ("cuda", "tpu") else "cpu"
        used = {"observed": True, "accelerator": accelerator, "name": "a device", "count": 1, "label": device}
    document = {
        "schema_version": 3,
        "run_name": name,
        "run": {
            "record_version": 1,
            "experiment": "train",
            "argv": list(argv),
            "exit_status": status,
            "started_at": started_at,
            "wall_time_s": wall,
            **({"device": used} if used else {}),
        },
        "metrics": metrics,
        "series": series or {},
        **extra,
        "environment": {
            "host": "box",
            "device_type": device,
            "device_name": "a device",
            "python": "3.11.7",
            "torch": "2.13.0",
            "torch_xla": None,
            "torch_tpu": None,
            "image": image,
            "image_id": None,
            "image_digest": None,
            "lock_sha256": lock,
            "git_revision": "0123456789abcdef",
            "git_dirty": True,
            "distributions": [],
        },
    }
    (directory / f"{name}.json").write_text(json.dumps(document))
    return document


def notebook_block(cpu_mode: bool, accelerator: str = "t4") -> dict:
    """The ``notebook`` block a notebook's run writes into its record (colab, on its lock)."""
    return {
        "platform": "colab",
        "accelerator": accelerator,
        "found": "CPU" if cpu_mode else "Tesla T4",
        "cpu_mode": cpu_mode,
        "experiment": "train",
        "target": "colab-t4",
        "packages": "lock",
        "lock_sha256": "ab" * 32,
        "installer": "uv 0.13.9",
        "lock_differences": None,
        "runtime": {"python": "3.11.7", "version": {}, "packages": {}},
        "files": {},
    }

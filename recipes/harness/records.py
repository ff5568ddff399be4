"""The results JSON (envkit/data/results.schema.json): what ran, where, how fast and how well.

A student can skip this module: it records, it does not train.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .devices import Replicas, is_xla
from .errors import RecipeError
from .files import json_bytes, write_temp

SCHEMA_VERSION = 3
# A git commit hash; anything else in ENVKIT_REVISION (such as "unknown", which images built by
# older
# envkit releases set when they had no git) names no revision.
_REVISION = re.compile(r"[0-9a-f]{4,40}")


def git_revision() -> str | None:
    """The commit the recipes came from: ``ENVKIT_REVISION`` (the image build passes the full hash),
    else ``git rev-parse HEAD`` next to the recipe (the full hash), else None."""
    revision = os.environ.get("ENVKIT_REVISION", "").strip()
    if revision:
        return revision if _REVISION.fullmatch(revision) else None
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def _package_version(distribution: str) -> str | None:
    """A distribution's version, looked up without importing it (importing torch_tpu starts a
    runtime)."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def installed_distributions() -> list[str]:
    """Every distribution this interpreter has, as sorted ``name==version`` with PEP 503 names."""
    from importlib import metadata

    found = set()
    for distribution in metadata.distributions():
        name = distribution.metadata["Name"]
        if name:
            found.add(f"{re.sub(r'[-_.]+', '-', name).lower()}=={distribution.version}")
    return sorted(found)


# Written by envkit's venv maker (envkit/host/venv.py MARKER) into the venv's root.
VENV_LOCK_MARKER = "envkit-lock.json"


def venv_lock_sha256() -> str | None:
    """The sha256 of the lock this interpreter's venv was made from, or None when it was not made
    from one."""
    try:
        marker = json.loads(Path(sys.prefix, VENV_LOCK_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    sha = marker.get("lock_sha256") if isinstance(marker, dict) else None
    return sha if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha) else None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def capture_environment(device: torch.device, device_kind: str) -> dict:
    """The ``environment`` block of the results JSON (envkit/data/results.schema.json)."""
    if device.type == "cuda":
        name, count = torch.cuda.get_device_name(device), torch.cuda.device_count()
    elif is_xla(device):
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr

        name, count = f"XLA:{xm.xla_device_hw(device)}", xr.global_runtime_device_count()
    elif device.type == "tpu":  # TorchTPU
        name, count = "TPU (torch_tpu)", torch.accelerator.device_count()
    else:
        name, count = _cpu_name(), os.cpu_count() or 1
    torch_xla_version = (
        _package_version("torch_xla") if is_xla(device) or device_kind == "tpu" else None
    )
    return {
        "host": socket.gethostname(),
        "device_type": device_kind,
        "device_name": name,
        "device_count": count,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": _package_version("torchvision"),
        "torch_xla": torch_xla_version,
        "torch_tpu": _package_version("torch-tpu"),
        # The CUDA release this torch was built for, whatever device ran (a CPU run on a CUDA build
        # names one too).
        "torch_cuda_build": torch.version.cuda,
        "image": os.environ.get("ENVKIT_IMAGE") or None,
        # What the image says about itself: the hash of the lock it installed, and its own ID.
        # On the host, the lock `envkit venv` made this interpreter's venv from.
        "lock_sha256": os.environ.get("ENVKIT_LOCK_SHA256") or venv_lock_sha256(),
        "image_id": os.environ.get("ENVKIT_IMAGE_ID") or None,
        # Its manifest digest where run.sh knows one (pulled by name@sha256:, or built by buildah):
        # the same on every engine.
        "image_digest": os.environ.get("ENVKIT_IMAGE_DIGEST") or None,
        "git_revision": git_revision(),
        "distributions": installed_distributions(),
    }


def configuration_record(
    args: argparse.Namespace,
    replicas: Replicas,
    *,
    model: str,
    image_size: int | None,
    cores: int | None = None,
    strategy: str | None = None,
    parallel: str | None = None,
) -> dict:
    """The results' ``configuration``: what the report groups runs by (null where it does not
    apply)."""
    return {
        "device": args.device,
        "backend": args.backend
        if args.device == "tpu"
        else None,  # the library behind the TPU device (tpu_backend.py)
        "cores": cores,
        "strategy": strategy,
        "parallel": parallel,
        "world_size": args.world_size,
        "nodes": replicas.nodes,
        "processes_per_node": replicas.processes_per_node,
        "model": model,
        "global_batch": args.global_batch,
        "per_device_batch": args.per_device_batch,
        "image_size": image_size,
        "dataset": args.dataset,
    }


def now_iso() -> str:
    """The current UTC time, ISO 8601 with offset, to the second."""
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()


def build_results(
    *,
    recipe: str,
    run_name: str,
    started_at: str,
    settings: dict,
    configuration: dict,
    timing: dict,
    metrics: dict,
    environment: dict,
) -> dict:
    """The results document (envkit/data/results.schema.json)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "recipe": recipe,
        "run_name": run_name,
        "started_at": started_at,
        "settings": settings,
        "configuration": configuration,
        "timing": timing,
        "metrics": metrics,
        "environment": environment,
    }


def write_results(results_dir: Path, results: dict) -> Path:
    """Write ``<results_dir>/<recipe>-<run_name>.json`` atomically, never over an existing file.

    When that name is taken, ``-2``, ``-3``, ... is appended to the run name (and
    recorded in the document), so nobody's earlier results are lost. The file is
    linked into place (fails if the name exists) rather than renamed (which
    would overwrite).
    """
    base = results["run_name"]
    for attempt in range(1, 10_000):
        run_name = base if attempt == 1 else f"{base}-{attempt}"
        path = results_dir / f"{results['recipe']}-{run_name}.json"
        if path.exists():
            continue
        data = json_bytes({**results, "run_name": run_name})
        # data bound as a default: the loop's next value never reaches this call
        temp = write_temp(results_dir, path.name, lambda file, data=data: file.write(data))
        try:
            os.link(temp, path)
        except FileExistsError:
            continue
        finally:
            os.unlink(temp)
        results.update(run_name=run_name)
        return path
    raise RecipeError(f"no free results file name for run {base!r} in {results_dir}")


def settings_record(args: argparse.Namespace) -> dict:
    """The results' ``settings``: every argument after defaults and scaling, JSON-ready."""
    return {
        key: str(value) if isinstance(value, Path) else value
        for key, value in sorted(vars(args).items())
    }


def summarize(values: Sequence[float]) -> dict:
    """``{"mean", "std", "n"}`` of ``values``; std is the population std (0.0 for fewer than 2)."""
    n = len(values)
    if n == 0:
        return {"mean": 0.0, "std": 0.0, "n": 0}
    mean = sum(values) / n
    variance = sum((v - mean) ** 2 for v in values) / n
    return {"mean": mean, "std": variance**0.5, "n": n}


def timing_record(history: Any, total_s: float) -> dict:
    """The results' ``timing`` from a history with ``epoch_s``, ``iter_s``, ``train_epoch_s``,
    ``test_epoch_s`` and ``checkpoint_s`` lists (seconds); ``steady_epoch_s`` leaves out the first
    epoch."""
    return {
        "total_s": total_s,
        "first_epoch_s": history.epoch_s[0],
        "iter_s": summarize(history.iter_s),
        "epoch_s": summarize(history.epoch_s),
        "steady_epoch_s": summarize(history.epoch_s[1:]),
        "train_epoch_s": summarize(history.train_epoch_s),
        "test_epoch_s": summarize(history.test_epoch_s),
        "checkpoint_s": summarize(history.checkpoint_s),
    }

"""The results JSON (envkit/data/results.schema.json): what ran, where, how fast and how well.

A student can skip this module: it records, it does not train.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .devices import Replicas, is_xla
from .errors import RecipeError
from .files import json_bytes, write_temp

SCHEMA_VERSION = 3
# The run wrapper (envkit_run.py) that starts a run names it here; the record carries it so that the
# wrapper adopts this record, and not another run's written into the same results folder meanwhile.
RUN_ID_VARIABLE = "ENVKIT_RUN_ID"


def _package_version(distribution: str) -> str | None:
    """A distribution's version, looked up without importing it."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def capture_environment(device: torch.device, device_kind: str) -> dict:
    """What of the ``environment`` block (envkit/data/results.schema.json) needs torch: the device
    it initialised and its own build. The process's facts (host, Python, image, lock, git,
    distributions) are the run wrapper's, which adds them to the record it adopts
    (envkit/support/provenance.py): a run started without it records these alone."""
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
    xla_used = is_xla(device) or device_kind == "tpu"
    torch_xla_version = _package_version("torch_xla") if xla_used else None
    return {
        "device_type": device_kind,
        "device_name": name,
        "device_count": count,
        "torch": torch.__version__,
        "torchvision": _package_version("torchvision"),
        "torch_xla": torch_xla_version,
        # The CUDA release this torch was built for, whatever device ran (a CPU run on a CUDA build
        # names one too).
        "torch_cuda_build": torch.version.cuda,
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
    series: dict,
    environment: dict,
    threads: dict | None = None,
) -> dict:
    """The results document (envkit/data/results.schema.json): the core any command's record has
    (``metrics``, ``series``, the environment) and the recipe section (``configuration``,
    ``timing``, ``settings``)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "recipe": recipe,
        "run_name": run_name,
        "run_id": os.environ.get(RUN_ID_VARIABLE) or None,
        "started_at": started_at,
        "settings": settings,
        "configuration": configuration,
        "timing": timing,
        "metrics": metrics,
        "series": series,
        "environment": environment,
        "threads": threads,
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


# The per-epoch lists of a history that are the record's ``series``, by series name: the loss,
# the test accuracy and the epoch's time. envkit reads an older record's metrics.epoch_loss and
# epoch_test_accuracy as the first two (envkit/runs/results.py's RECIPE_SERIES).
SERIES = {"loss": "epoch_loss", "test_accuracy": "epoch_accuracy", "epoch_s": "epoch_s"}


def series_record(history: Any) -> dict:
    """The results' ``series``, as a command's (dvclive's per-step TSV) are written: per series
    ``{"step": [...], "value": [...]}``, a recipe's step being the epoch (1, 2, ...)."""
    return {
        name: {"step": list(range(1, len(values) + 1)), "value": list(values)}
        for name, attribute in SERIES.items()
        if (values := getattr(history, attribute))
    }


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

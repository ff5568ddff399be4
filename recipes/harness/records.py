"""The results JSON (envkit/data/results.schema.json): what ran, where, how fast and how well.

A student can skip this module: it records, it does not train.
"""

from __future__ import annotations

import argparse
import datetime
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .arguments import RESULTS_FOLDER, RESULTS_VARIABLE
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


def wrapper_adopts(results_dir: Path) -> bool:
    """Whether the run wrapper that started this run (it names the run in ENVKIT_RUN_ID) adopts
    the record written into ``results_dir``: it watches its own results folder alone."""
    watched = Path(os.environ.get(RESULTS_VARIABLE) or RESULTS_FOLDER)
    return bool(os.environ.get(RUN_ID_VARIABLE)) and results_dir.resolve() == watched.resolve()


def capture_environment(device: torch.device, device_kind: str, results_dir: Path) -> dict:
    """What of the ``environment`` block (envkit/data/results.schema.json) the harness owns: the
    devices it initialised, named as torch names them where it does (a CUDA GPU, XLA:CPU or
    XLA:TPU, TorchTPU; the run wrapper's observation calls XLA:CPU a CPU), torchvision and the CUDA
    release torch was built for. Every other fact has one owner, the run wrapper
    (envkit/support/provenance_facts.py), which adds them to the record it adopts: the CPU's model,
    torch's and torch_xla's versions, host, Python, image, lock, git and distributions."""
    if device.type == "cuda":
        name, count = torch.cuda.get_device_name(device), torch.cuda.device_count()
    elif is_xla(device):
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr

        name, count = f"XLA:{xm.xla_device_hw(device)}", xr.global_runtime_device_count()
    elif device.type == "tpu":  # TorchTPU
        name, count = "TPU (torch_tpu)", torch.accelerator.device_count()
    else:  # the CPU: its model is the wrapper's to look up
        name, count = None, os.cpu_count() or 1
    named = {"device_type": device_kind, "device_name": name} if name else {}
    own = {
        **named,
        "device_count": count,
        "torchvision": _package_version("torchvision"),
        # The CUDA release this torch was built for, whatever device ran (a CPU run on a CUDA build
        # names one too).
        "torch_cuda_build": torch.version.cuda,
    }
    if wrapper_adopts(results_dir):
        return own
    # python recipes/mnist.py: no wrapper adopts the record, which must still name the device and
    # torch (the schema requires them). torch's and torch_xla's by the wrapper's rule, the installed
    # distribution's version (torch.__version__ may add a local tag, +cu130, that the distribution
    # and its lock do not have); no CPU model.
    return {
        "device_type": device_kind,
        "device_name": None,
        "torch": _package_version("torch"),
        "torch_xla": _package_version("torch_xla"),
        **own,
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

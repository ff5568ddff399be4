"""The arguments every recipe takes, batch size and learning-rate scaling (E3), warm-up, and run
names."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import RecipeError, fail, import_optional

DEVICES = ("cpu", "cuda", "tpu")
DATASETS = ("real", "fake")
# Where run.sh, the launch engines and the notebooks say the run's device, data and results are
# (issue 25 §5): the defaults of --device, --data-dir and --results-dir, which still override them.
DEVICE_VARIABLE = "ENVKIT_DEVICE"
DATA_VARIABLE = "ENVKIT_DATA_DIR"
RESULTS_VARIABLE = "ENVKIT_RESULTS_DIR"
# --results-dir without ENVKIT_RESULTS_DIR (a recipe run by hand): the run wrapper's folder
# name. A copy, since the recipes run where envkit is not installed and never import it;
# everything envkit starts sets the variable, so the copy serves a hand-run recipe alone
# (tests/recipes/test_harness.py compares it with envkit's RESULTS_FOLDER).
RESULTS_FOLDER = "results"


class RecipeArgumentParser(argparse.ArgumentParser):
    """argparse prints the whole usage on a bad argument; recipe users get one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        fail(self.prog, f"{message} (see '{self.prog} --help')")


def _integer_at_least(minimum: int, wanted: str) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``; the error says ``expected <wanted>``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
        return value

    return parse


positive_int = _integer_at_least(1, "a positive integer")
non_negative_int = _integer_at_least(0, "an integer >= 0")


def positive_float(text: str) -> float:
    """argparse type: a finite float > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def add_common_arguments(parser: argparse.ArgumentParser, *, default_epochs: int) -> None:
    """Add the arguments every recipe takes (docs/design.md section 6)."""
    device = _environment_default(DEVICE_VARIABLE, "cpu")
    if device not in DEVICES:
        fail(
            parser.prog,
            f"{DEVICE_VARIABLE}={device!r} is not a device; give one of {', '.join(DEVICES)}",
        )
    data_dir = Path(_environment_default(DATA_VARIABLE, "data"))
    results_dir = Path(_environment_default(RESULTS_VARIABLE, RESULTS_FOLDER))
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default=device,
        help=f"where to train (default: ${DEVICE_VARIABLE}, else cpu)",
    )
    parser.add_argument(
        "--dataset",
        choices=DATASETS,
        default="real",
        help="real: the torchvision dataset under --data-dir; fake: generated, deterministic, "
        "learnable data",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=data_dir,
        help=f"dataset root (default: ${DATA_VARIABLE}, else data)",
    )
    parser.add_argument(
        "--download",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="download the real dataset when it is missing (default: yes)",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=results_dir,
        help=f"where the results JSON goes (default: ${RESULTS_VARIABLE}, else {RESULTS_FOLDER})",
    )
    parser.add_argument(
        "--epochs",
        type=positive_int,
        default=default_epochs,
        help=f"training epochs (default: {default_epochs})",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument(
        "--max-steps",
        type=positive_int,
        default=None,
        help="stop after this many optimiser steps (smoke runs)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue from the last checkpoint of this run name"
    )
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=None,
        help="where checkpoints go (default: <results-dir>/checkpoints)",
    )
    parser.add_argument(
        "--run-name",
        default=None,
        help="results/checkpoint name (default: derived from the configuration)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars (for CI logs)")
    parser.add_argument(
        "--log-every",
        type=positive_int,
        default=50,
        help="steps between loss updates on the progress bar (default: 50)",
    )


def _environment_default(name: str, default: str) -> str:
    """A flag's default from the environment; an empty variable counts as unset."""
    return os.environ.get(name) or default


def add_fake_data_arguments(parser: argparse.ArgumentParser, *, train: int, test: int) -> None:
    parser.add_argument(
        "--fake-train-size",
        type=positive_int,
        default=train,
        help=f"--dataset fake: training images (default: {train})",
    )
    parser.add_argument(
        "--fake-test-size",
        type=positive_int,
        default=test,
        help=f"--dataset fake: test images (default: {test})",
    )


def add_batch_arguments(
    parser: argparse.ArgumentParser,
    *,
    reference_batch: int,
    default: str,
    optimizer: str,
    lr: float,
    lr_scaling: str,
) -> None:
    """Batch size, learning-rate scaling and warm-up: the knobs of E3.

    ``reference_batch`` is the global batch the published ``lr`` belongs to; ``default``
    says which batch stays fixed when the replica count changes: "per-device" (E1:
    128 per TPU core) or "global" (E2: 256 however many GPUs).
    """
    batch = parser.add_mutually_exclusive_group()
    per_device_default = f" (default: {reference_batch})" if default == "per-device" else ""
    global_default = f" (default: {reference_batch})" if default == "global" else ""
    batch.add_argument(
        "--per-device-batch",
        type=positive_int,
        default=None,
        help="batch per replica; the global batch is this times the replica "
        f"count{per_device_default}",
    )
    batch.add_argument(
        "--global-batch",
        type=positive_int,
        default=None,
        help=f"batch over all replicas; must divide by their count{global_default}",
    )
    parser.add_argument(
        "--lr",
        type=positive_float,
        default=lr,
        help=f"{optimizer} learning rate at the reference global batch of {reference_batch} "
        f"(default: {lr})",
    )
    parser.add_argument(
        "--lr-scaling",
        choices=("linear", "none"),
        default=lr_scaling,
        help=f"linear: lr x global batch / {reference_batch} (E3); none: --lr as given (default: "
        f"{lr_scaling})",
    )
    parser.add_argument(
        "--warmup-epochs",
        type=non_negative_int,
        default=0,
        help="ramp the learning rate up linearly over this many epochs before it decays; large "
        "scaled batches need it (E3) (default: 0, as published)",
    )


def resolve_batches(
    args: argparse.Namespace, replicas: int, *, reference_batch: int, default: str
) -> None:
    """Record on ``args`` the replica count (``world_size``), per-device and global batch,
    and the learning rate they imply (``effective_lr``, E3)."""
    if args.global_batch is None and args.per_device_batch is None:
        if default == "per-device":
            args.per_device_batch = reference_batch
        else:
            args.global_batch = reference_batch
    if args.global_batch is not None:
        if args.global_batch % replicas:
            raise RecipeError(
                f"--global-batch {args.global_batch} does not divide over {replicas} replicas; use "
                f"a multiple of {replicas} or --per-device-batch"
            )
        args.per_device_batch = args.global_batch // replicas
    else:
        args.global_batch = args.per_device_batch * replicas
    args.world_size = replicas
    scale = args.global_batch / reference_batch if args.lr_scaling == "linear" else 1.0
    args.effective_lr = args.lr * scale


class WarmupThenDecay:
    """Learning-rate factor per epoch for LambdaLR: a linear ramp over ``warmup`` epochs (1/(w+1)
    ... w/(w+1)), then ``gamma`` ** (epochs since the ramp). With no warm-up this is
    StepLR(step_size=1, gamma)."""

    def __init__(self, warmup: int, gamma: float):
        self.warmup = warmup
        self.gamma = gamma

    def __call__(self, epoch: int) -> float:
        return (
            (epoch + 1) / (self.warmup + 1)
            if epoch < self.warmup
            else self.gamma ** (epoch - self.warmup)
        )


def check_run_name(name: str) -> str:
    """A run name becomes part of file names: letters, digits, '.', '_' and '-' only."""
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    if not name or not set(name) <= allowed or name.startswith("."):
        raise RecipeError(
            f"--run-name {name!r} is not allowed: use letters, digits, '.', '_' and '-' (not "
            "starting with '.')"
        )
    return name


def default_run_name(
    device: str, *, world_size: int = 1, strategy: str | None = None, parallel: str | None = None
) -> str:
    """A run name from the configuration: ``cpu``, ``tpu-x8-xmp``, ``cuda-x4-ddp``."""
    name = device
    if world_size > 1 or strategy in ("xmp", "spmd", "ddp") or parallel in ("dp", "ddp"):
        name += f"-x{world_size}"
    mode = (
        strategy
        if strategy not in (None, "single")
        else parallel
        if parallel not in (None, "none")
        else None
    )
    if mode:
        name += f"-{mode}"
    return name


def parse_arguments(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> argparse.Namespace:
    """``parser.parse_args(argv)`` plus what every recipe checks and fills in after it."""
    args = parser.parse_args(argv)
    if args.run_name is not None:
        check_run_name(args.run_name)
    check_progress_bars(args)
    args.checkpoint_dir = args.checkpoint_dir or args.results_dir / "checkpoints"
    return args


def check_progress_bars(args: argparse.Namespace) -> None:
    """Progress bars need tqdm: say so before training starts, not at the first bar."""
    if not args.quiet:
        import_optional("tqdm", "a progress bar", "tqdm", instead="--quiet")

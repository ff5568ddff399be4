"""The harness every envkit recipe shares, so a recipe file holds only its network, data and step.

It does, once for every recipe: arguments (the common ones, and batch size, learning-rate
scaling and warm-up), devices, the replicas a run trains on, in-memory data loading,
timing, progress bars, checkpoints and resume, and the results JSON.

Recipes run inside the images with only torch (+ tqdm, + torchvision for real data,
+ torch_xla on TPU) installed, so this module imports nothing else at top level and
never imports envkit. Recipes import it as a sibling module (``python recipes/mnist.py``
puts ``recipes/`` on ``sys.path``).

Errors a user can fix are raised as :class:`RecipeError` (one line: what was wrong,
what is allowed); :func:`run_recipe` turns them into ``<recipe>: error: ...`` on
stderr and exit status 2.

One vocabulary for data parallelism (:class:`Replicas`): *replicas* are the copies of
the model the global batch is split over (the results' ``world_size``); *processes*
are what torch.distributed counts (``rank`` of ``world_size``), each loading its own
shard of the data. They differ where one process feeds several replicas
(DataParallel, SPMD).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TextIO

import torch

SCHEMA_VERSION = 2
DEVICES = ("cpu", "cuda", "tpu")
DATASETS = ("real", "fake")

class RecipeError(Exception):
    """A problem the user can fix; the message is one line: what was wrong, what is allowed."""


# --------------------------------------------------------------------------- arguments


class RecipeArgumentParser(argparse.ArgumentParser):
    """argparse prints the whole usage on a bad argument; recipe users get one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        fail(self.prog, f"{message} (see '{self.prog} --help')")


def fail(prog: str, message: str) -> None:
    """Print ``<prog>: error: <message>`` as one line on stderr and exit with status 2."""
    one_line = " ".join(str(message).split())
    print_lines([f"{prog}: error: {one_line}"], sys.stderr)
    raise SystemExit(2)


def run_recipe(prog: str, main: Callable[[], Any]) -> None:
    """Run ``main()`` and exit: RecipeError -> one line + exit 2, Ctrl-C -> exit 130.

    Anything else is a bug in the recipe and keeps its traceback.
    """
    try:
        main()
    except RecipeError as exc:
        fail(prog, str(exc))
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None


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
    """Add the arguments every recipe takes (docs/design.md section 4)."""
    parser.add_argument("--device", choices=DEVICES, default="cpu", help="where to train (default: cpu)")
    parser.add_argument(
        "--dataset", choices=DATASETS, default="real",
        help="real: the torchvision dataset under --data-dir; fake: generated, deterministic, learnable data",
    )
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="dataset root (default: data)")
    parser.add_argument(
        "--download", action=argparse.BooleanOptionalAction, default=True,
        help="download the real dataset when it is missing (default: yes)",
    )
    parser.add_argument("--results-dir", type=Path, default=Path("results"), help="where the results JSON goes (default: results)")
    parser.add_argument("--epochs", type=positive_int, default=default_epochs, help=f"training epochs (default: {default_epochs})")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--max-steps", type=positive_int, default=None, help="stop after this many optimiser steps (smoke runs)")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint of this run name")
    parser.add_argument(
        "--checkpoint-dir", type=Path, default=None,
        help="where checkpoints go (default: <results-dir>/checkpoints)",
    )
    parser.add_argument("--run-name", default=None, help="results/checkpoint name (default: derived from the configuration)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars (for CI logs)")
    parser.add_argument("--log-every", type=positive_int, default=50, help="steps between loss updates on the progress bar (default: 50)")


def add_fake_data_arguments(parser: argparse.ArgumentParser, *, train: int, test: int) -> None:
    parser.add_argument("--fake-train-size", type=positive_int, default=train, help=f"--dataset fake: training images (default: {train})")
    parser.add_argument("--fake-test-size", type=positive_int, default=test, help=f"--dataset fake: test images (default: {test})")


def add_batch_arguments(parser: argparse.ArgumentParser, *, reference_batch: int, default: str, optimizer: str,
                        lr: float, lr_scaling: str) -> None:
    """Batch size, learning-rate scaling and warm-up: the knobs of E3.

    ``reference_batch`` is the global batch the published ``lr`` belongs to; ``default``
    says which batch stays fixed when the replica count changes: "per-device" (E1:
    128 per TPU core) or "global" (E2: 256 however many GPUs).
    """
    batch = parser.add_mutually_exclusive_group()
    per_device_default = f" (default: {reference_batch})" if default == "per-device" else ""
    global_default = f" (default: {reference_batch})" if default == "global" else ""
    batch.add_argument("--per-device-batch", type=positive_int, default=None,
                       help=f"batch per replica; the global batch is this times the replica count{per_device_default}")
    batch.add_argument("--global-batch", type=positive_int, default=None,
                       help=f"batch over all replicas; must divide by their count{global_default}")
    parser.add_argument("--lr", type=positive_float, default=lr,
                        help=f"{optimizer} learning rate at the reference global batch of {reference_batch} (default: {lr})")
    parser.add_argument("--lr-scaling", choices=("linear", "none"), default=lr_scaling,
                        help=f"linear: lr x global batch / {reference_batch} (E3); none: --lr as given (default: {lr_scaling})")
    parser.add_argument("--warmup-epochs", type=non_negative_int, default=0,
                        help="ramp the learning rate up linearly over this many epochs before it decays; "
                             "large scaled batches need it (E3) (default: 0, as published)")


def resolve_batches(args: argparse.Namespace, replicas: int, *, reference_batch: int, default: str) -> None:
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
                f"--global-batch {args.global_batch} does not divide over {replicas} replicas; "
                f"use a multiple of {replicas} or --per-device-batch"
            )
        args.per_device_batch = args.global_batch // replicas
    else:
        args.global_batch = args.per_device_batch * replicas
    args.world_size = replicas
    scale = args.global_batch / reference_batch if args.lr_scaling == "linear" else 1.0
    args.effective_lr = args.lr * scale


class WarmupThenDecay:
    """Learning-rate factor per epoch for LambdaLR: a linear ramp over ``warmup`` epochs (1/(w+1) ... w/(w+1)),
    then ``gamma`` ** (epochs since the ramp). With no warm-up this is StepLR(step_size=1, gamma)."""

    def __init__(self, warmup: int, gamma: float):
        self.warmup, self.gamma = warmup, gamma

    def __call__(self, epoch: int) -> float:
        return (epoch + 1) / (self.warmup + 1) if epoch < self.warmup else self.gamma ** (epoch - self.warmup)


def check_run_name(name: str) -> str:
    """A run name becomes part of file names: letters, digits, '.', '_' and '-' only."""
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    if not name or not set(name) <= allowed or name.startswith("."):
        raise RecipeError(f"--run-name {name!r} is not allowed: use letters, digits, '.', '_' and '-' (not starting with '.')")
    return name


def default_run_name(device: str, *, world_size: int = 1, strategy: str | None = None, parallel: str | None = None) -> str:
    """A run name from the configuration: ``cpu``, ``tpu-x8-xmp``, ``cuda-x4-ddp``."""
    name = device
    if world_size > 1 or strategy in ("xmp", "spmd", "ddp") or parallel in ("dp", "ddp"):
        name += f"-x{world_size}"
    mode = strategy if strategy not in (None, "single") else parallel if parallel not in (None, "none") else None
    if mode:
        name += f"-{mode}"
    return name


def import_optional(module: str, what: str, install: str, instead: str | None = None):
    """Import an optional dependency, or RecipeError naming what to install (never a traceback)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        alternative = f"use {instead}, or " if instead else ""
        raise RecipeError(f"{what} needs {install}, which is not installed here; {alternative}pip install {install}") from None


def parse_arguments(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
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


# --------------------------------------------------------------------------- devices


def select_device(kind: str) -> torch.device:
    """The torch device for ``--device kind``; RecipeError when that hardware or software is missing."""
    if kind == "cpu":
        return torch.device("cpu")
    if kind == "cuda":
        if not torch.cuda.is_available():
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            hint = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
            raise RecipeError(
                f"--device cuda: no CUDA GPU is visible to torch {torch.__version__}{hint}; "
                "use --device cpu, or run in the cuda image with GPUs passed in"
            )
        return torch.device("cuda")
    if kind == "tpu":
        xla = import_torch_xla()
        return xla.device()
    raise RecipeError(f"--device {kind!r} is not known; choose one of {', '.join(DEVICES)}")


def choose_gpus(text: str) -> None:
    """``--gpus 1,2,3,4``: CUDA_VISIBLE_DEVICES, set before anything initialises CUDA (torch does so
    lazily), so device 0 is the first GPU listed; RecipeError for anything but distinct GPU ids."""
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isascii() and part.isdigit() for part in parts):
        raise RecipeError(f"--gpus {text!r} is not a comma-separated list of GPU ids; use integers such as 0,1,2,3")
    if len(set(map(int, parts))) != len(parts):
        raise RecipeError(f"--gpus {text!r} names a GPU twice; list each GPU id once")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(int(part)) for part in parts)


def import_torch_xla():
    """Import torch_xla, or RecipeError saying which image has it."""
    try:
        import torch_xla  # noqa: PLC0415 - only the tpu image has it
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "torch_xla":
            raise RecipeError(
                "--device tpu needs torch_xla, which is not installed here; use the tpu-vm image "
                "(or PJRT_DEVICE=CPU with torch_xla installed for a CPU dry run)"
            ) from None
        # Installed but broken (a missing shared library, a torch of another release):
        # "not installed" would send the user looking in the wrong place.
        reason = " ".join(str(exc).split())
        raise RecipeError(
            f"--device tpu: torch_xla is installed but does not import ({reason}); it needs torch of "
            "the same release and the shared libpython, as the tpu-vm image provides"
        ) from None
    return torch_xla


def is_xla(device: torch.device) -> bool:
    return device.type == "xla"


def synchronize(device: torch.device) -> None:
    """Wait until the work queued on ``device`` has finished, so a clock reading means something.

    CUDA launches kernels asynchronously and XLA builds a lazy graph that runs on
    ``sync``; without this a timer measures only how fast the host queues work.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "tpu":  # TorchTPU
        torch.accelerator.synchronize()
    elif is_xla(device):
        import torch_xla  # noqa: PLC0415
        import torch_xla.core.xla_model as xm  # noqa: PLC0415

        torch_xla.sync()
        xm.wait_device_ops()


def seed_everything(seed: int, device: torch.device | None = None) -> None:
    """Seed Python's ``random``, torch (CPU and CUDA) and, on XLA, the device RNG."""
    random.seed(seed)
    torch.manual_seed(seed)
    if device is not None and is_xla(device):
        import torch_xla.core.xla_model as xm  # noqa: PLC0415

        xm.set_rng_state(seed, device=device)


def after_step(device: torch.device, callback: Callable[[torch.Tensor], None], tensor: torch.Tensor) -> None:
    """Run ``callback(tensor)`` once the step's value exists: on XLA when the step's graph has run
    (reading it earlier would run the graph an extra time), elsewhere at once."""
    if is_xla(device):
        import torch_xla.core.xla_model as xm  # noqa: PLC0415

        xm.add_step_closure(callback, args=(tensor,))
    else:
        callback(tensor)


def xla_compilations() -> int:
    """How many graphs torch_xla has compiled in this process so far (a steady epoch adds none)."""
    import torch_xla.debug.metrics as met  # noqa: PLC0415

    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


# --------------------------------------------------------------------------- replicas


@dataclass
class Replicas:
    """How this process takes part in data-parallel training.

    ``replicas``: copies of the model the global batch is split over (the results'
    ``world_size``). ``rank`` of ``world_size``: this process among the processes
    that each load their own shard of the data (torch.distributed's words); one
    process that feeds several replicas (DataParallel, SPMD) is rank 0 of 1.
    ``nodes``: hosts those processes run on.
    """

    device: torch.device
    rank: int = 0
    world_size: int = 1
    replicas: int | None = None  # default: one per process
    local_rank: int = 0  # this process among those on its host (its GPU on cuda)
    nodes: int = 1

    def __post_init__(self):
        if self.replicas is None:
            self.replicas = self.world_size

    @property
    def is_main(self) -> bool:
        """Rank 0 alone prints, checkpoints and writes results."""
        return self.rank == 0

    @property
    def processes_per_node(self) -> int:
        return self.world_size // self.nodes

    def sum_over_processes(self, values: list[float]) -> list[float]:
        """Element-wise sum of ``values`` over every process (one collective); unchanged in one process."""
        if self.world_size == 1:
            return values
        if is_xla(self.device):
            import torch_xla.core.xla_model as xm  # noqa: PLC0415

            return xm.mesh_reduce("sum_over_processes", values, lambda all_: [sum(column) for column in zip(*all_)])
        import torch.distributed as dist  # noqa: PLC0415

        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return tensor.tolist()


# --------------------------------------------------------------------------- timing


class DeviceTimer:
    """Wall-clock laps; ``lap(sync=True)`` first waits for the device's queued work.

    Recipes sync at epoch ends, not every step: a per-step sync stalls the
    pipeline (the mistake E1 warns about). Per-step laps then measure the host's
    step rate, which equals the device's in steady state, and the epoch-end sync
    lands in the epoch's last lap, so the laps of an epoch add up to its time.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self._last = time.perf_counter()

    def lap(self, sync: bool = False) -> float:
        """Seconds since the last lap (or since the timer was made), and start the next lap."""
        if sync:
            synchronize(self.device)
        now = time.perf_counter()
        elapsed, self._last = now - self._last, now
        return elapsed


def summarize(values: Sequence[float]) -> dict:
    """``{"mean", "std", "n"}`` of ``values``; std is the population std (0.0 for fewer than 2)."""
    n = len(values)
    if n == 0:
        return {"mean": 0.0, "std": 0.0, "n": 0}
    mean = sum(values) / n
    variance = sum((v - mean) ** 2 for v in values) / n
    return {"mean": mean, "std": variance ** 0.5, "n": n}


# --------------------------------------------------------------------------- data


def fake_split(
    count: int, shape: Sequence[int], num_classes: int, *, template_seed: int, sample_seed: int, noise: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` images of ``shape`` and int64 labels: class template (from ``template_seed``)
    plus Gaussian noise and labels drawn from ``sample_seed``. Same seeds -> same tensors."""
    templates = torch.randn((num_classes, *shape), generator=torch.Generator().manual_seed(template_seed))
    sampler = torch.Generator().manual_seed(sample_seed)
    labels = torch.randint(0, num_classes, (count,), generator=sampler)
    images = templates[labels] + noise * torch.randn((count, *shape), generator=sampler)
    return images, labels


class IndexBatchDataset(torch.utils.data.Dataset):
    """In-memory tensors fetched a whole batch at a time.

    Used with ``DataLoader(..., sampler=BatchSampler(...), batch_size=None)`` a
    batch is one tensor gather instead of ``batch_size`` per-sample transforms and
    a collate, which keeps the input pipeline off the critical path.
    """

    def __init__(self, *tensors: torch.Tensor):
        if len({len(t) for t in tensors}) != 1:
            raise ValueError("all tensors must have the same length")
        self.tensors = tensors

    def __len__(self) -> int:
        return len(self.tensors[0])

    def __getitem__(self, indices):
        index = torch.as_tensor(indices, device=self.tensors[0].device)
        return tuple(t[index] for t in self.tensors)

    def to(self, device: torch.device) -> "IndexBatchDataset":
        """The same data on ``device``: on a GPU, batches are then gathered there, with no copy per step."""
        return IndexBatchDataset(*(t.to(device) for t in self.tensors))


class ShardSampler(torch.utils.data.Sampler):
    """Evaluation shard ``rank::world``: unlike DistributedSampler it pads nothing,
    so summing correct counts over the shards counts every test image exactly once."""

    def __init__(self, length: int, rank: int = 0, world_size: int = 1):
        self.indices = range(rank, length, world_size)

    def __iter__(self):
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def batch_loader(
    dataset: IndexBatchDataset,
    batch_size: int,
    *,
    train: bool,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    drop_last: bool = False,
) -> torch.utils.data.DataLoader:
    """A DataLoader of pre-collated batches from in-memory tensors.

    Training: a DistributedSampler shard (also at world size 1), shuffled from
    ``seed`` and the epoch set with ``loader.sampler.sampler.set_epoch`` (see
    :func:`set_loader_epoch`), so the order depends only on seed and epoch and a
    resumed run sees the same batches. Evaluation: an unpadded in-order shard.
    ``drop_last`` drops a final short training batch, whose new shape would make
    XLA compile the step again.
    """
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler  # noqa: PLC0415

    if train:
        order = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    else:
        order = ShardSampler(len(dataset), rank, world_size)
    return DataLoader(dataset, sampler=BatchSampler(order, batch_size, drop_last=drop_last and train), batch_size=None)


def set_loader_epoch(loader: torch.utils.data.DataLoader, epoch: int) -> None:
    """Reshuffle a :func:`batch_loader` training loader for ``epoch`` (DistributedSampler.set_epoch)."""
    loader.sampler.sampler.set_epoch(epoch)


def shard_loaders(train_set: IndexBatchDataset, test_set: IndexBatchDataset, replicas: Replicas, *,
                  batch: int, test_batch: int, seed: int):
    """This process's training loader (its shuffled shard; a short last batch dropped: a new shape
    would make XLA compile again, and BatchNorm could see one image) and test loader (its unpadded shard)."""
    shard = {"seed": seed, "rank": replicas.rank, "world_size": replicas.world_size}
    train = batch_loader(train_set, batch, train=True, drop_last=True, **shard)
    if len(train) == 0:
        raise RecipeError(f"no training step: {len(train.sampler.sampler)} training images per data shard is "
                          f"less than one batch of {batch}; use a smaller batch or more data")
    return train, batch_loader(test_set, test_batch, train=False, **shard)


def open_dataset(dataset_class, data_dir: Path, folder: str, *, train: bool, download: bool, missing: str, fix: str):
    """``dataset_class(data_dir, train, download)`` from torchvision, or RecipeError: what is missing, why, what to do.
    What a download wrote under ``data_dir/folder`` goes to the results owner (see chown_tree)."""
    try:
        dataset = dataset_class(str(data_dir), train=train, download=download)
    except (RuntimeError, OSError) as exc:
        how = "the download failed" if download else "downloading is off (--no-download)"
        raise RecipeError(f"{missing} and {how} ({' '.join(str(exc).split())[:120]}); "
                          f"{fix}, allow the download, or use --dataset fake") from None
    if download:
        chown_tree(Path(data_dir) / folder)
    return dataset


# --------------------------------------------------------------------------- progress


def progress(iterable: Iterable, *, total: int | None, desc: str, enabled: bool):
    """A tqdm bar over ``iterable`` when ``enabled`` (main process, not --quiet), else the iterable."""
    if not enabled:
        return iterable
    from tqdm import tqdm  # noqa: PLC0415 - only needed when a bar is shown

    return tqdm(iterable, total=total, desc=desc, leave=False, dynamic_ncols=True, file=sys.stderr)


def print_lines(lines: Iterable[str], stream: TextIO | None = None) -> None:
    """Print ``lines`` to ``stream`` (default stdout) in one write.

    Several processes (DDP ranks) share one stdout and stderr, and under PYTHONUNBUFFERED
    (set in every image) ``print`` writes the text and its newline separately,
    so two ranks' lines would run together. One small write to a pipe is atomic.
    """
    stream = stream or sys.stdout
    stream.write("".join(f"{line}\n" for line in lines))
    stream.flush()


# --------------------------------------------------------------------------- files


def chown_to_results_owner(path: Path) -> None:
    """Give ``path`` to ``ENVKIT_RESULTS_OWNER=uid:gid`` when running as root.

    The tpu-vm container runs as root (it needs --privileged); without this the
    user's results directory fills with files they cannot delete.
    """
    owner = os.environ.get("ENVKIT_RESULTS_OWNER", "")
    if not owner or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return
    try:
        uid, gid = (int(part) for part in owner.split(":"))
    except ValueError:
        raise RecipeError(f"ENVKIT_RESULTS_OWNER={owner!r} is not 'uid:gid' with numeric ids") from None
    os.chown(path, uid, gid)


def chown_tree(root: Path) -> None:
    """:func:`chown_to_results_owner` for ``root`` and everything under it (e.g. a dataset
    torchvision just downloaded as root into the user's mounted data directory)."""
    if not os.environ.get("ENVKIT_RESULTS_OWNER") or not Path(root).exists():
        return
    chown_to_results_owner(Path(root))
    for directory, subdirectories, files in os.walk(root):
        for name in subdirectories + files:
            chown_to_results_owner(Path(directory) / name)


def ensure_directory(path: Path) -> Path:
    """Create ``path`` (and parents) and hand new directories to the results owner."""
    missing = []
    current = Path(path)
    while not current.exists():
        missing.append(current)
        current = current.parent
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RecipeError(f"cannot create directory {path}: {exc.strerror}") from None
    for created in reversed(missing):
        chown_to_results_owner(created)
    return path


def _write_temp(directory: Path, stem: str, write: Callable[[Any], None]) -> Path:
    """Write through ``write(file)`` into a temp file in ``directory``; return its path."""
    ensure_directory(directory)
    handle, name = tempfile.mkstemp(prefix=f".{stem}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(name, 0o644)
        chown_to_results_owner(Path(name))
    except BaseException:
        os.unlink(name)
        raise
    return Path(name)


def write_atomic(path: Path, write: Callable[[Any], None]) -> None:
    """Replace ``path`` atomically with what ``write(binary_file)`` writes: readers see the old or the new file, never half."""
    temp = _write_temp(path.parent, path.name, write)
    os.replace(temp, path)


def json_bytes(data: Any) -> bytes:
    """Deterministic JSON: sorted keys, two-space indent, trailing newline."""
    return (json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()


# --------------------------------------------------------------------------- results


def git_revision() -> str | None:
    """``ENVKIT_REVISION`` (set by the image build), else ``git rev-parse HEAD`` next to the recipe, else None."""
    revision = os.environ.get("ENVKIT_REVISION", "").strip()
    if revision:
        return revision
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
            capture_output=True, text=True, timeout=10, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def _package_version(distribution: str) -> str | None:
    """A distribution's version, looked up without importing it (importing torch_tpu starts a runtime)."""
    from importlib import metadata  # noqa: PLC0415

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def installed_distributions() -> list[str]:
    """Every distribution this interpreter has, as sorted ``name==version`` with PEP 503 names."""
    from importlib import metadata  # noqa: PLC0415

    found = set()
    for distribution in metadata.distributions():
        name = distribution.metadata["Name"]
        if name:
            found.add(f"{re.sub(r'[-_.]+', '-', name).lower()}=={distribution.version}")
    return sorted(found)


# Written by envkit's venv maker (envkit/host/venv.py MARKER) into the venv's root.
VENV_LOCK_MARKER = "envkit-lock.json"


def venv_lock_sha256() -> str | None:
    """The sha256 of the lock this interpreter's venv was made from, or None when it was not made from one."""
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
        import torch_xla.core.xla_model as xm  # noqa: PLC0415
        import torch_xla.runtime as xr  # noqa: PLC0415

        name, count = f"XLA:{xm.xla_device_hw(device)}", xr.global_runtime_device_count()
    elif device.type == "tpu":  # TorchTPU
        name, count = "TPU (torch_tpu)", torch.accelerator.device_count()
    else:
        name, count = _cpu_name(), os.cpu_count() or 1
    torch_xla_version = _package_version("torch_xla") if is_xla(device) or device_kind == "tpu" else None
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
        "cuda": torch.version.cuda,
        "image": os.environ.get("ENVKIT_IMAGE") or None,
        # What the image says about itself: the hash of the lock it installed, and its own ID.
        # On the host, the lock `envkit venv` made this interpreter's venv from.
        "lock_sha256": os.environ.get("ENVKIT_LOCK_SHA256") or venv_lock_sha256(),
        "image_id": os.environ.get("ENVKIT_IMAGE_ID") or None,
        "git_revision": git_revision(),
        "distributions": installed_distributions(),
    }


def configuration_record(args: argparse.Namespace, replicas: Replicas, *, model: str, image_size: int | None,
                         cores: int | None = None, strategy: str | None = None, parallel: str | None = None) -> dict:
    """The results' ``configuration``: what the report groups runs by (null where it does not apply)."""
    return {
        "device": args.device,
        "backend": args.backend if args.device == "tpu" else None,  # the library behind the TPU device (tpu_backend.py)
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
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


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
        document = {**results, "run_name": run_name}
        temp = _write_temp(results_dir, path.name, lambda file: file.write(json_bytes(document)))
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
    return {key: str(value) if isinstance(value, Path) else value for key, value in sorted(vars(args).items())}


def timing_record(history: Any, total_s: float) -> dict:
    """The results' ``timing`` from a history with ``epoch_s``, ``iter_s``, ``train_epoch_s``,
    ``test_epoch_s`` and ``checkpoint_s`` lists (seconds); ``steady_epoch_s`` leaves out the first epoch."""
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


# --------------------------------------------------------------------------- checkpoints


def checkpoint_path(checkpoint_dir: Path, recipe: str, run_name: str) -> Path:
    """Where a run's checkpoint lives: ``<checkpoint_dir>/<recipe>-<run_name>.pt``."""
    return checkpoint_dir / f"{recipe}-{run_name}.pt"


def rng_states(device: torch.device | None = None) -> dict:
    """Every RNG state a resumed run needs to continue bit-identically."""
    states = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    if device is not None and is_xla(device):
        import torch_xla.core.xla_model as xm  # noqa: PLC0415

        states["xla"] = int(xm.get_rng_state(device=device))
    return states


def restore_rng_states(states: dict, device: torch.device | None = None) -> None:
    """Undo :func:`rng_states`."""
    random.setstate(states["python"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    if "xla" in states and device is not None and is_xla(device):
        import torch_xla.core.xla_model as xm  # noqa: PLC0415

        xm.set_rng_state(states["xla"], device=device)


def to_cpu(value: Any) -> Any:
    """``value`` with every tensor moved to the CPU (XLA/CUDA tensors cannot be saved portably)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: to_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(item) for item in value)
    return value


def save_checkpoint(path: Path, state: dict) -> None:
    """Save ``state`` (tensors moved to CPU) atomically: a kill mid-write leaves the previous checkpoint."""
    cpu_state = to_cpu(state)
    write_atomic(path, lambda file: torch.save(cpu_state, file))


def load_checkpoint(path: Path) -> dict:
    """Load a checkpoint written by :func:`save_checkpoint`; RecipeError if it is unreadable.

    ``weights_only=True``: a checkpoint is data, never code to run.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise RecipeError(f"checkpoint {path} does not exist") from None
    except Exception as exc:  # torch raises many types for a damaged file
        # Only the exception type: torch's messages span lines and suggest weights_only=False.
        raise RecipeError(
            f"checkpoint {path} is corrupt or unreadable ({type(exc).__name__}); "
            "delete it to start over, or pass another --checkpoint-dir"
        ) from None
    if not isinstance(state, dict) or "epoch" not in state:
        raise RecipeError(f"checkpoint {path} is not an envkit recipe checkpoint; delete it or pass another --checkpoint-dir")
    return state


def check_resumable(path: Path, saved: dict, current: dict) -> None:
    """RecipeError when a checkpoint was written with different training settings than this run's."""
    differences = [
        f"{key}: {saved.get(key)!r} in the checkpoint, {current.get(key)!r} now"
        for key in sorted(set(saved) | set(current))
        if saved.get(key) != current.get(key)
    ]
    if differences:
        raise RecipeError(
            f"cannot resume from {path}: it was written with other settings ({'; '.join(differences)}); "
            "rerun with the same settings, or without --resume"
        )


def resume_checkpoint(prog: str, path: Path, settings: dict, *, announce: bool) -> dict | None:
    """For ``--resume``: the checkpoint at ``path`` if it was written with ``settings``, None if there is none
    (said on stderr when ``announce``, e.g. on the main process only); RecipeError if it does not fit."""
    if not path.exists():
        if announce:
            print(f"{prog}: no checkpoint at {path}; starting from the first epoch", file=sys.stderr)
        return None
    state = load_checkpoint(path)
    check_resumable(path, state.get("training_settings", {}), settings)
    return state


def resume_settings(args: argparse.Namespace, keys: Sequence[str]) -> dict:
    """The settings a checkpoint must share with the run that resumes it."""
    return {key: getattr(args, key) for key in keys}


# --------------------------------------------------------------------------- the run


@dataclass
class History:
    """Everything measured so far; saved in checkpoints so a resumed run reports the whole run."""

    epoch_s: list = field(default_factory=list)
    train_epoch_s: list = field(default_factory=list)
    test_epoch_s: list = field(default_factory=list)
    checkpoint_s: list = field(default_factory=list)
    iter_s: list = field(default_factory=list)
    epoch_loss: list = field(default_factory=list)
    epoch_accuracy: list = field(default_factory=list)
    epoch_lr: list = field(default_factory=list)
    compilations: list = field(default_factory=list)  # XLA compilations after each epoch
    train_images: int = 0  # over all processes
    steps: int = 0
    elapsed_s: float = 0.0  # wall time of earlier (interrupted) segments


def global_accuracy(model: torch.nn.Module, batches: Iterable, replicas: Replicas) -> float:
    """Accuracy over the whole test set: each process counts its own shard on the device (no host
    sync per batch), then the counts are summed over processes, so no replica reports its shard alone."""
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=replicas.device)
    count = 0
    with torch.no_grad():
        for images, labels in batches:
            correct += (model(images).argmax(dim=1) == labels).sum()
            count += len(labels)
    correct_total, count_total = replicas.sum_over_processes([correct.item(), count])
    return correct_total / count_total


class Run:
    """One training run: its clock, history, checkpoint every epoch, resume, and results.

    A recipe builds its model, optimiser and scheduler, then::

        training = harness.Run(args, replicas, recipe="mnist", prog="mnist.py", resume_keys=RESUME_KEYS)
        training.restore(parts)   # --resume: state, RNGs and history from the checkpoint
        training.fit(parts, train_epoch, evaluate)
        training.write_results(configuration, metrics)

    ``parts`` names everything with a ``state_dict`` (model, optimizer, scheduler, ...);
    the checkpoint keeps them under those names.
    """

    def __init__(self, args: argparse.Namespace, replicas: Replicas, *, recipe: str, prog: str, resume_keys: Sequence[str]):
        self.args, self.replicas, self.recipe, self.prog = args, replicas, recipe, prog
        self.started_at, self.started = now_iso(), time.perf_counter()
        self.settings = resume_settings(args, resume_keys)
        self.checkpoint = checkpoint_path(args.checkpoint_dir, recipe, args.run_name)
        self.saved = (resume_checkpoint(prog, self.checkpoint, self.settings, announce=replicas.is_main)
                      if args.resume else None)
        if args.resume:
            self._check_every_process_resumes_alike()
        self.history = History()
        self.first_epoch = 0
        seed_everything(args.seed, replicas.device)

    def _check_every_process_resumes_alike(self) -> None:
        """Rank 0 alone writes checkpoints: on several hosts, a host that cannot see them would start
        from the first epoch while the others resume, and the run would hang. Every process says so instead."""
        epoch = 0 if self.saved is None else self.saved["epoch"]
        total, processes = self.replicas.sum_over_processes([epoch, 1])
        if total != epoch * processes:
            raise RecipeError(f"--resume: the processes do not all see the checkpoint {self.checkpoint} (this one: "
                              f"{'epoch ' + str(epoch) if self.saved else 'none'}); put --checkpoint-dir where every host sees it")

    def elapsed_s(self) -> float:
        """Wall time of the whole run, earlier (interrupted) segments included."""
        return self.history.elapsed_s + time.perf_counter() - self.started

    def restore(self, parts: dict) -> None:
        """With --resume and a checkpoint: every part's state, the RNGs and the history so far."""
        if self.saved is not None:
            for name, part in parts.items():
                part.load_state_dict(self.saved[name])
            restore_rng_states(self.saved["rng"], self.replicas.device)
            self.history, self.first_epoch = History(**self.saved["history"]), self.saved["epoch"]
        self.args.resumed_from_epoch = self.first_epoch if self.saved is not None else None

    def fit(self, parts: dict, train_epoch: Callable[[int], float], evaluate: Callable[[], float]) -> None:
        """Train, evaluate and checkpoint every epoch until --epochs (or --max-steps).

        ``train_epoch(epoch)`` returns the epoch's mean loss over every process and
        appends its step laps to ``history.iter_s`` / ``train_epoch_s``;
        ``evaluate()`` returns the accuracy over the whole test set.
        """
        args, history = self.args, self.history
        optimizer = parts["optimizer"]
        for epoch in range(self.first_epoch, args.epochs):
            if args.max_steps is not None and history.steps >= args.max_steps:
                break
            epoch_start = time.perf_counter()
            history.epoch_lr.append(optimizer.param_groups[0]["lr"])
            history.epoch_loss.append(train_epoch(epoch))
            test_start = time.perf_counter()
            history.epoch_accuracy.append(evaluate())
            history.test_epoch_s.append(time.perf_counter() - test_start)
            history.epoch_s.append(time.perf_counter() - epoch_start)
            if is_xla(self.replicas.device):
                history.compilations.append(xla_compilations())
            parts["scheduler"].step()
            if self.replicas.is_main:
                if not args.quiet:
                    print(f"{self.prog}: epoch {epoch + 1}/{args.epochs}: loss {history.epoch_loss[-1]:.4f}, "
                          f"test accuracy {history.epoch_accuracy[-1]:.4f}, train {history.train_epoch_s[-1]:.2f} s, "
                          f"test {history.test_epoch_s[-1]:.2f} s", file=sys.stderr)
                self.save(parts, epoch + 1)
        if not history.epoch_s:
            raise RecipeError(f"nothing to do: the checkpoint {self.checkpoint} already holds {self.first_epoch} epochs; "
                              "raise --epochs, or start without --resume")

    def steps(self, loader, batches: Iterable, epoch: int):
        """Yield this epoch's training batches, and around each step the run's bookkeeping:
        the shuffle of ``epoch``, the progress bar, step count, --max-steps and the timing laps.

        The device is synced once, at the end of the epoch, not every step: a per-step sync
        stalls the device (the mistake E1 warns about)."""
        args, history = self.args, self.history
        set_loader_epoch(loader, epoch)  # DistributedSampler.set_epoch: a new order every epoch
        self._shown = self.replicas.is_main and not args.quiet
        total = len(loader) if args.max_steps is None else min(len(loader), args.max_steps - history.steps)
        self._bar = progress(batches, total=total, desc=f"epoch {epoch + 1}/{args.epochs}", enabled=self._shown)
        timer, laps = DeviceTimer(self.replicas.device), []
        for batch in self._bar:
            yield batch
            history.steps += 1
            laps.append(timer.lap())
            if args.max_steps is not None and history.steps >= args.max_steps:
                break
        laps[-1] += timer.lap(sync=True)  # the epoch's queued work finishes in its last step
        history.iter_s.extend(laps)
        history.train_epoch_s.append(sum(laps))

    def show_loss(self, loss: torch.Tensor, step_in_epoch: int) -> None:
        """Every --log-every steps, put ``loss`` on the progress bar once its step has run (no extra sync)."""
        # TorchTPU: a .item() on rank 0 alone deadlocks the other ranks, so DDP there shows no loss.
        tpu_ranks = self.replicas.device.type == "tpu" and self.replicas.world_size > 1
        if self._shown and step_in_epoch % self.args.log_every == 0 and not tpu_ranks:
            after_step(self.replicas.device, lambda value: self._bar.set_postfix(loss=f"{value.item():.4f}"), loss)

    def save(self, parts: dict, epochs_done: int) -> None:
        save_start = time.perf_counter()
        save_checkpoint(self.checkpoint, {
            "epoch": epochs_done,
            "sampler_epoch": epochs_done,  # the next epoch's shuffle (DistributedSampler.set_epoch)
            **{name: part.state_dict() for name, part in parts.items()},
            "rng": rng_states(self.replicas.device),
            "history": {**vars(self.history), "elapsed_s": self.elapsed_s()},
            "training_settings": self.settings,
        })
        self.history.checkpoint_s.append(time.perf_counter() - save_start)

    def write_results(self, configuration: dict, metrics: dict) -> Path | None:
        """Rank 0 writes ``<results-dir>/<recipe>-<run-name>.json`` and prints one summary line."""
        if not self.replicas.is_main:
            return None
        history = self.history
        if history.compilations:  # XLA: a steady run compiles everything in its first epoch
            metrics = {**metrics, "xla_compilations": history.compilations[-1], "xla_compilations_per_epoch": history.compilations}
        metrics = {
            "test_accuracy": history.epoch_accuracy[-1],
            "final_loss": history.epoch_loss[-1],
            "epoch_loss": history.epoch_loss,
            "epoch_test_accuracy": history.epoch_accuracy,
            "steps": history.steps,
            "epochs_completed": len(history.epoch_s),
            **metrics,
        }
        results = build_results(
            recipe=self.recipe, run_name=self.args.run_name, started_at=self.started_at,
            settings=settings_record(self.args), configuration=configuration,
            timing=timing_record(history, self.elapsed_s()), metrics=metrics,
            environment=capture_environment(self.replicas.device, self.args.device),
        )
        path = write_results(self.args.results_dir, results)
        timing = results["timing"]
        speed = f"{metrics['images_per_s']:.1f} images/s, " if "images_per_s" in metrics else ""
        print(
            f"{self.recipe} {results['run_name']}: {metrics['epochs_completed']} epochs, {history.steps} steps, "
            f"test accuracy {metrics['test_accuracy']:.4f}, {speed}{timing['iter_s']['mean']:.4f} s/iter, "
            f"train {timing['train_epoch_s']['mean']:.2f} s/epoch, test {timing['test_epoch_s']['mean']:.2f} s/epoch, "
            f"first epoch {timing['first_epoch_s']:.1f} s, total {timing['total_s']:.1f} s -> {path}"
        )
        return path

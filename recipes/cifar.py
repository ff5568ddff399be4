"""CIFAR-10 at 112 px on one device, with DataParallel, or with DistributedDataParallel (experiments E2, E3).

    python recipes/cifar.py --dataset fake --epochs 2                               # one CPU process
    python recipes/cifar.py --dataset fake --parallel ddp --nproc 2                 # 2 gloo processes via torchrun
    python recipes/cifar.py --device cuda --gpus 1,2,3,4 --parallel dp --show-scatter
    python recipes/cifar.py --device cuda --gpus 0,1,2,3 --parallel ddp --model resnet50
    torchrun --standalone --nproc_per_node=4 recipes/cifar.py --device cuda --parallel ddp

Model (torchvision MobileNetV2 or ResNet50, 10 classes, no pretrained weights),
optimiser and schedule are E2's: SGD lr 0.1, momentum 0.9, weight decay 5e-4,
cosine annealing stepped per epoch, cross-entropy, global batch 256, 10 epochs.
Fixed mistakes of the published comparison: test images are resized like the
training images, the training set is shuffled, DistributedSampler.set_epoch is
called every epoch, and loss and accuracy are summed over every process.
Writes ``<results-dir>/cifar-<run-name>.json`` (rank 0 only) and a checkpoint every epoch.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import common
from common import RecipeError

RECIPE = "cifar"
PROG = "cifar.py"
MODELS = ("mobilenet_v2", "resnet50")
PARALLEL = ("none", "dp", "ddp")
NUM_CLASSES = 10
STORED_SHAPE = (3, 32, 32)  # CIFAR-10 images as stored; resized on the device (see prepare_batch)
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
# The global batch E2's learning rate belongs to; --lr-scaling linear scales from it.
REFERENCE_BATCH = 256
DEFAULT_CPU_PROCESSES = 2
# Settings a checkpoint must share with the run that resumes it. Unlike MNIST's
# StepLR, the cosine schedule depends on the epoch count, so epochs are included.
RESUME_KEYS = (
    "device", "parallel", "world_size", "model", "image_size", "dataset", "seed", "epochs",
    "global_batch", "per_device_batch", "lr", "lr_scaling", "effective_lr", "warmup_epochs",
    "momentum", "weight_decay", "amp", "channels_last", "fake_train_size", "fake_test_size",
)


# --------------------------------------------------------------------------- arguments


def build_parser() -> argparse.ArgumentParser:
    parser = common.RecipeArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    common.add_common_arguments(parser, default_epochs=10)
    parser.add_argument("--model", choices=MODELS, default="mobilenet_v2", help="torchvision model, 10 classes (default: mobilenet_v2)")
    parser.add_argument("--image-size", type=common.positive_int, default=112,
                        help="side in pixels the 32 px images are resized to, for training and test alike (default: 112)")
    parser.add_argument("--parallel", choices=PARALLEL, default="none",
                        help="none: one device; dp: nn.DataParallel in one process; "
                             "ddp: DistributedDataParallel, one process per device under torchrun (default: none)")
    parser.add_argument("--gpus", default=None,
                        help="cuda: comma-separated GPU ids, e.g. 1,2,3,4; sets CUDA_VISIBLE_DEVICES before CUDA starts")
    parser.add_argument("--nproc", type=common.positive_int, default=None,
                        help=f"cpu: ddp processes, or the devices --show-scatter assumes for dp (default: {DEFAULT_CPU_PROCESSES})")
    batch = parser.add_mutually_exclusive_group()
    batch.add_argument("--global-batch", type=common.positive_int, default=None,
                       help=f"batch over all replicas; must divide by their count (default: {REFERENCE_BATCH})")
    batch.add_argument("--per-device-batch", type=common.positive_int, default=None,
                       help="batch per replica; the global batch is this times the replica count")
    parser.add_argument("--test-batch", type=common.positive_int, default=None,
                        help="evaluation batch per process (default: the per-process training batch)")
    parser.add_argument("--lr", type=common.positive_float, default=0.1, help="SGD learning rate at the reference batch (default: 0.1)")
    parser.add_argument("--lr-scaling", choices=("none", "linear"), default="none",
                        help=f"none: --lr as given (E2); linear: lr x global batch / {REFERENCE_BATCH} (E3) (default: none)")
    parser.add_argument("--warmup-epochs", type=non_negative_int, default=0,
                        help="epochs of linear learning-rate warm-up before the cosine decay (E3) (default: 0)")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default: 0.9)")
    parser.add_argument("--weight-decay", type=float, default=5e-4, help="SGD weight decay (default: 5e-4)")
    parser.add_argument("--preset", choices=("faithful", "fast"), default="faithful",
                        help="faithful: E2's plain settings; fast: channels_last, AMP, pinned memory, loader workers "
                             "and (cuda, not dp) torch.compile, unless set one by one (default: faithful)")
    parser.add_argument("--amp", choices=("none", "bf16", "fp16"), default=None, help="autocast dtype (default: none; fast: bf16, fp16 on GPUs without bf16)")
    parser.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None, help="NHWC memory format (default: off; fast: on)")
    parser.add_argument("--pin-memory", action=argparse.BooleanOptionalAction, default=None, help="page-locked host batches, cuda only (default: off; fast: on)")
    parser.add_argument("--workers", type=non_negative_int, default=None, help="DataLoader worker processes (default: 0; fast: 2)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="torch.compile the model (default: off; fast: on for cuda without dp)")
    parser.add_argument("--show-scatter", action="store_true",
                        help="print how the first batch is split over the replicas and the gathered output size")
    parser.add_argument("--data-check", choices=("md5", "exists"), default="md5",
                        help="real data: md5 = torchvision's checksum check of the official files; exists = only check the "
                             "files are there (for re-encoded or test copies) (default: md5)")
    parser.add_argument("--fake-train-size", type=common.positive_int, default=1024, help="--dataset fake: training images (default: 1024)")
    parser.add_argument("--fake-test-size", type=common.positive_int, default=256, help="--dataset fake: test images (default: 256)")
    return parser


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def parse_gpu_ids(text: str) -> list[int]:
    """``"1,2,3,4"`` -> ``[1, 2, 3, 4]``; RecipeError for anything but distinct non-negative integers."""
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isascii() and part.isdigit() for part in parts):
        raise RecipeError(f"--gpus {text!r} is not a comma-separated list of GPU ids; use integers such as 0,1,2,3")
    ids = [int(part) for part in parts]
    if len(set(ids)) != len(ids):
        raise RecipeError(f"--gpus {text!r} names a GPU twice; list each GPU id once")
    return ids


def under_torchrun() -> bool:
    """torchrun (torch.distributed.run) sets these for every process it starts."""
    return all(name in os.environ for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE"))


def resolve_topology(args: argparse.Namespace) -> None:
    """Set ``args.world_size`` (replicas the global batch is split over) and check the device options fit together."""
    if args.gpus is not None and args.device != "cuda":
        raise RecipeError(f"--gpus applies to --device cuda only; --device {args.device} has no GPUs to choose")
    if args.nproc is not None and not (args.device == "cpu" and args.parallel != "none"):
        raise RecipeError("--nproc applies to --device cpu with --parallel dp or ddp; on cuda the GPU count comes from --gpus")
    if args.device == "tpu":
        raise RecipeError("--device tpu is not supported by the cifar recipe; use cpu or cuda (the TPU comparison is mnist.py)")
    if args.device == "cpu":
        if args.parallel != "none":
            args.nproc = args.nproc or DEFAULT_CPU_PROCESSES
        # DataParallel without GPUs runs the module once on the whole batch: one replica.
        args.world_size = args.nproc if args.parallel == "ddp" else 1
    else:
        if args.gpus is not None:
            # Set before anything initialises CUDA (torch does so lazily), so device 0 is the first listed GPU.
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(gpu) for gpu in parse_gpu_ids(args.gpus))
        count = torch.cuda.device_count()
        if count == 0:
            common.select_device("cuda")  # raises the one-line "no GPU visible" error
        if args.parallel == "none" and count > 1 and args.gpus is not None:
            raise RecipeError(f"--parallel none trains on one GPU but --gpus lists {count}; list one GPU, or use --parallel dp or ddp")
        args.world_size = 1 if args.parallel == "none" else count
    if under_torchrun():
        if args.parallel != "ddp":
            raise RecipeError(f"running under torchrun needs --parallel ddp, not {args.parallel}")
        # torchrun's --nproc_per_node is what counts when a user starts torchrun themselves.
        args.world_size = int(os.environ["WORLD_SIZE"])
    if args.parallel == "ddp" and args.world_size < 2:
        raise RecipeError(
            f"--parallel ddp needs at least 2 devices, got {args.world_size}; "
            "use --parallel none for one device, or give more GPUs (--gpus) or processes (--nproc)"
        )


def resolve_batches(args: argparse.Namespace) -> None:
    """Per-replica and global batch and the learning rate they imply (E3), recorded on ``args``."""
    if args.per_device_batch is not None:
        args.global_batch = args.per_device_batch * args.world_size
    else:
        args.global_batch = args.global_batch or REFERENCE_BATCH
        if args.global_batch % args.world_size:
            raise RecipeError(
                f"--global-batch {args.global_batch} does not divide over {args.world_size} replicas; "
                f"use a multiple of {args.world_size} or --per-device-batch"
            )
        args.per_device_batch = args.global_batch // args.world_size
    # DataParallel splits the global batch inside one process; every other mode feeds each process its share.
    args.process_batch = args.global_batch if args.parallel == "dp" else args.per_device_batch
    args.test_batch = args.test_batch or args.process_batch
    scale = args.global_batch / REFERENCE_BATCH if args.lr_scaling == "linear" else 1.0
    args.effective_lr = args.lr * scale
    if args.warmup_epochs >= args.epochs:
        raise RecipeError(f"--warmup-epochs {args.warmup_epochs} leaves no epoch for the decay; use fewer than --epochs {args.epochs}")


def apply_preset(args: argparse.Namespace) -> None:
    """Fill the speed options the user left unset: all off (faithful to E2), or the ``fast`` choices."""
    fast = args.preset == "fast"
    cuda = args.device == "cuda"
    if args.amp is None:
        # On GPUs bf16 needs Ampere or later; "auto" is settled by resolve_auto_amp in the training
        # process, so a torchrun launcher never opens a CUDA context of its own.
        args.amp = ("auto" if cuda else "bf16") if fast else "none"
    if args.channels_last is None:
        args.channels_last = fast
    if args.pin_memory is None:
        args.pin_memory = fast and cuda
    if args.workers is None:
        args.workers = 2 if fast else 0
    if args.compile is None:
        # Compiling on CPU needs a C++ toolchain and minutes; DataParallel re-replicates the module every step.
        args.compile = fast and cuda and args.parallel != "dp"
    if args.compile and args.parallel == "dp":
        raise RecipeError("--compile does not work with --parallel dp (DataParallel replicates the module every step); use none or ddp")
    if args.pin_memory and not cuda:
        raise RecipeError("--pin-memory speeds up copies to a GPU only; use it with --device cuda")


def resolve_auto_amp(args: argparse.Namespace) -> None:
    """``--preset fast`` on cuda: bf16 where the GPU supports it, else fp16 (with a gradient scaler)."""
    if args.amp == "auto":
        args.amp = "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.run_name is not None:
        common.check_run_name(args.run_name)
    resolve_topology(args)
    resolve_batches(args)
    apply_preset(args)
    # Model and batch in the name: E2 compares both, and their runs must not take each other's names.
    args.run_name = args.run_name or f"{args.model}-b{args.global_batch}-" + common.default_run_name(
        args.device, world_size=args.world_size, parallel=args.parallel)
    args.checkpoint_dir = args.checkpoint_dir or args.results_dir / "checkpoints"
    return args


def checkpoint_file(args: argparse.Namespace) -> Path:
    return common.checkpoint_path(args.checkpoint_dir, RECIPE, args.run_name)


# --------------------------------------------------------------------------- data


def cifar10_class(data_check: str):
    """torchvision's CIFAR10, or (``exists``) a subclass that skips only the md5 comparison.

    torchvision refuses any copy of CIFAR-10 whose files differ from the
    official ones, so tests (which write a few images in the same pickle format)
    could not use its loader. Rather than a reader of our own, the subclass sets
    the expected md5s to None, which torchvision's ``check_integrity`` treats as
    "the file exists": everything else, pickle reading included, is torchvision's.
    """
    try:
        from torchvision.datasets import CIFAR10  # noqa: PLC0415 - fake data needs no torchvision
    except ImportError:
        raise RecipeError("--dataset real needs torchvision, which is not installed here; use --dataset fake") from None
    if data_check == "md5":
        return CIFAR10

    class ExistenceCheckedCIFAR10(CIFAR10):
        train_list = [[name, None] for name, _ in CIFAR10.train_list]
        test_list = [[name, None] for name, _ in CIFAR10.test_list]
        meta = {**CIFAR10.meta, "md5": None}

    return ExistenceCheckedCIFAR10


def cifar_split(data_dir: Path, *, train: bool, download: bool, data_check: str) -> tuple[torch.Tensor, torch.Tensor]:
    """One CIFAR-10 split as uint8 images [N, 3, 32, 32] and int64 labels, read by torchvision."""
    dataset_class = cifar10_class(data_check)
    try:
        dataset = dataset_class(str(data_dir), train=train, download=download)
    except (RuntimeError, OSError) as exc:
        how = "the download failed" if download else "downloading is off (--no-download)"
        check = " or fails torchvision's md5 check" if data_check == "md5" else ""
        raise RecipeError(
            f"CIFAR-10 is not under {data_dir}/cifar-10-batches-py{check}, and {how} "
            f"({' '.join(str(exc).split())[:120]}); put the python-version batches there, allow the download, "
            "or use --dataset fake"
        ) from None
    images = torch.from_numpy(dataset.data).permute(0, 3, 1, 2).contiguous()
    return images, torch.tensor(dataset.targets, dtype=torch.int64)


def fake_images(count: int, *, seed: int, sample_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Learnable stand-in for CIFAR-10: uint8 32 px images, class templates (from ``seed``) plus per-image noise.

    Templates and noise are drawn at 8x8 and smoothed up to 32 px: coarse class
    patterns survive the resize and the models' global pooling, so MobileNetV2
    learns them in a few dozen steps (per-pixel patterns take far longer).
    """
    coarse, labels = common.fake_split(count, (3, 8, 8), NUM_CLASSES, template_seed=seed, sample_seed=sample_seed, noise=0.5)
    images = F.interpolate(coarse, size=STORED_SHAPE[1:], mode="bilinear", align_corners=False)
    # Real pixels' range, so fake data takes the same uint8 -> normalise -> resize path.
    return (128 + 40 * images).round().clamp(0, 255).to(torch.uint8), labels


def fake_splits(args: argparse.Namespace) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """Train and test splits of the fake set: same templates (classes), different images."""
    train = fake_images(args.fake_train_size, seed=args.seed, sample_seed=args.seed + 1)
    test = fake_images(args.fake_test_size, seed=args.seed, sample_seed=args.seed + 2)
    return train, test


def check_enough_images(args: argparse.Namespace, train_set: common.IndexBatchDataset) -> None:
    """RecipeError unless every process gets at least one full training batch (short ones are dropped)."""
    shards = args.world_size if args.parallel == "ddp" else 1
    if math.ceil(len(train_set) / shards) < args.process_batch:
        raise RecipeError(
            f"{len(train_set)} training images give each of {shards} process(es) less than one batch of "
            f"{args.process_batch}; use a smaller batch or more data"
        )


def load_data(args: argparse.Namespace, *, download: bool) -> tuple[common.IndexBatchDataset, common.IndexBatchDataset]:
    """Train and test sets as in-memory uint8 tensors (real CIFAR-10 or the seeded fake set)."""
    if args.dataset == "fake":
        train, test = fake_splits(args)
    else:
        train = cifar_split(args.data_dir, train=True, download=download, data_check=args.data_check)
        test = cifar_split(args.data_dir, train=False, download=False, data_check=args.data_check)
    return common.IndexBatchDataset(*train), common.IndexBatchDataset(*test)


def with_loader_options(loader: torch.utils.data.DataLoader, *, workers: int, pin_memory: bool) -> torch.utils.data.DataLoader:
    """``loader`` (from common.batch_loader) with worker processes and pinned memory, same batches and order."""
    if workers == 0 and not pin_memory:
        return loader
    return torch.utils.data.DataLoader(
        loader.dataset, sampler=loader.sampler, batch_size=None,
        num_workers=workers, pin_memory=pin_memory, persistent_workers=workers > 0,
    )


@functools.lru_cache(maxsize=None)
def normalisation(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """CIFAR-10's channel mean and std on ``device``, made once: a per-step host-to-GPU copy would stall the step."""
    return (torch.tensor(CIFAR_MEAN, device=device).view(1, 3, 1, 1), torch.tensor(CIFAR_STD, device=device).view(1, 3, 1, 1))


def prepare_batch(images: torch.Tensor, labels: torch.Tensor, device: torch.device, image_size: int, channels_last: bool):
    """uint8 32 px batch -> normalised float batch at ``image_size`` on ``device``.

    Resizing here, on the device and after the copy, moves ~50x fewer bytes
    than copying float 112 px images, keeps loader workers off the critical
    path, and is one function for training and test, so both always see the
    same size (E2's original evaluated at 32 px while training at 112).
    """
    images = images.to(device, non_blocking=True).float().div_(255)
    labels = labels.to(device, non_blocking=True)
    if images.shape[-1] != image_size:
        images = F.interpolate(images, size=(image_size, image_size), mode="bilinear", align_corners=False)
    mean, std = normalisation(images.device)
    images = (images - mean) / std
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    return images, labels


# --------------------------------------------------------------------------- models


class Autocast(nn.Module):
    """Run the wrapped model under autocast and return float32 logits.

    Autocast state is per thread and DataParallel runs each replica in its own
    thread (re-entering autocast there with the default dtype, fp16), so the
    dtype is set inside forward, where every replica applies it.
    """

    def __init__(self, model: nn.Module, device_type: str, dtype: torch.dtype):
        super().__init__()
        self.model = model
        self.device_type = device_type
        self.dtype = dtype

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        with torch.autocast(self.device_type, dtype=self.dtype):
            return self.model(images).float()


def build_model(name: str) -> nn.Module:
    """torchvision's model with a 10-class head and random weights (nothing is downloaded)."""
    from torchvision import models  # noqa: PLC0415

    return getattr(models, name)(weights=None, num_classes=NUM_CLASSES)


AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


# --------------------------------------------------------------------------- replicas


@dataclass
class Replicas:
    """How this process takes part: its device, its data shard, and how sums cross processes."""

    device: torch.device
    parallel: str
    rank: int = 0
    world_size: int = 1  # processes the data is sharded over: the ddp world, else 1
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        return self.parallel == "ddp"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def sum_over_processes(self, values: list[float]) -> list[float]:
        """Element-wise sum of ``values`` over every ddp process (one all-reduce); unchanged otherwise."""
        if not self.distributed:
            return values
        import torch.distributed as dist  # noqa: PLC0415

        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def wrap(self, model: nn.Module) -> nn.Module:
        """The model as training calls it: plain, DataParallel over the visible GPUs, or DDP."""
        if self.parallel == "dp":
            return nn.DataParallel(model)  # every visible GPU; on CPU it calls the module directly
        if self.parallel == "ddp":
            from torch.nn.parallel import DistributedDataParallel  # noqa: PLC0415

            device_ids = [self.local_rank] if self.device.type == "cuda" else None
            return DistributedDataParallel(model, device_ids=device_ids)
        return model


def local_replicas(args: argparse.Namespace) -> Replicas:
    """cpu or cuda in this process (none, or dp)."""
    return Replicas(device=common.select_device(args.device), parallel=args.parallel)


def distributed_replicas(args: argparse.Namespace) -> Replicas:
    """This torchrun process: its rank's device, and the process group (nccl on GPUs, gloo on CPU)."""
    import torch.distributed as dist  # noqa: PLC0415

    local_rank = int(os.environ["LOCAL_RANK"])
    if args.device == "cuda":
        common.select_device("cuda")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend=backend)
    return Replicas(device=device, parallel="ddp", rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank)


def relaunch_under_torchrun(args: argparse.Namespace, argv: list[str]) -> int:
    """Start this script under torchrun, one process per device, and return torchrun's exit status.

    One command then works for the user (``--parallel ddp`` alone); data is
    loaded (and downloaded) here once, before any process starts, so a missing
    dataset is one line here rather than one traceback per process.
    """
    check_enough_images(args, load_data(args, download=args.download)[0])
    if args.resume and args.amp != "auto":
        # A checkpoint that does not fit is then one line here, not one per process plus torchrun's
        # report. ("auto" AMP is settled in the training processes, which check it there.)
        common.resume_checkpoint(PROG, checkpoint_file(args), common.resume_settings(args, RESUME_KEYS), announce=False)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.world_size}",
        # "--": otherwise torchrun's parser reads our options as (abbreviations of) its own, e.g. --nproc.
        "--", str(Path(__file__).resolve()), *argv,
    ]
    if not args.quiet:
        print(f"{PROG}: starting {args.world_size} processes: torchrun --standalone --nproc_per_node={args.world_size} ...", file=sys.stderr)
    return subprocess.run(command, check=False).returncode


# --------------------------------------------------------------------------- scatter display


def shape_text(tensor: torch.Tensor) -> str:
    return "[" + ", ".join(str(size) for size in tensor.shape) + "]"


@contextlib.contextmanager
def replica_calls(model: nn.Module):
    """Record (device, input, output) of every call of ``model``, including DataParallel's replicas.

    DataParallel's replicas share the module's hook dictionary, so one hook
    sees each replica's share of the scattered batch.
    """
    calls: list[tuple[str, str, str]] = []

    def record(_module, inputs, output):
        calls.append((str(inputs[0].device), shape_text(inputs[0]), shape_text(output)))

    handle = model.register_forward_hook(record)
    try:
        yield calls
    finally:
        handle.remove()
        # Replica threads finish in any order; list them by device (cuda:2 before cuda:10).
        calls.sort(key=lambda call: (len(call[0]), call[0]))


def scatter_report(args: argparse.Namespace, replicas: Replicas, images: torch.Tensor, calls: list, output: torch.Tensor) -> list[str]:
    """What ``--show-scatter`` prints for the first training batch (the lesson of E2)."""
    if replicas.distributed:
        device, given, produced = calls[0]
        return [
            f"scatter (ddp rank {replicas.rank}/{replicas.world_size}, {device}): input {given} -> output {produced}; "
            f"no gather: each process keeps its outputs and DDP all-reduces gradients"
        ]
    if args.parallel == "none":
        device, given, produced = calls[0]
        return [f"scatter (none, {device}): input {given} -> output {produced}; one device, nothing to scatter or gather"]
    lines = [f"scatter (dp, {len(calls)} replica(s)): batch {shape_text(images)}"]
    lines += [f"  replica {index} on {device}: input {given} -> output {produced}" for index, (device, given, produced) in enumerate(calls)]
    lines.append(f"  gathered on {output.device}: output {shape_text(output)}")
    if replicas.device.type == "cpu":
        # torch.nn.parallel.scatter splits like Tensor.chunk; without GPUs nothing is scattered, so show the split it would make.
        shares = ", ".join(shape_text(chunk) for chunk in images.chunk(args.nproc))
        lines.append(
            f"  (cpu: DataParallel has no GPUs and runs the module once; over {args.nproc} GPUs "
            f"the scatter would give inputs {shares} and gather output [{len(images)}, {NUM_CLASSES}])"
        )
    return lines


# --------------------------------------------------------------------------- training


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
    train_images: int = 0  # over all processes
    steps: int = 0
    elapsed_s: float = 0.0  # wall time of earlier (interrupted) segments


@dataclass
class Trainer:
    """The model as trained and the step's parts, so one epoch function serves every mode."""

    net: nn.Module  # the bare torchvision model: checkpoints hold its weights
    model: nn.Module  # what training calls: autocast, DataParallel/DDP, compile
    eval_model: nn.Module  # what evaluation calls (see evaluate)
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    replicas: Replicas
    args: argparse.Namespace

    def batches(self, loader):
        args, device = self.args, self.replicas.device
        return (prepare_batch(x, y, device, args.image_size, args.channels_last) for x, y in loader)


def build_trainer(args: argparse.Namespace, replicas: Replicas) -> Trainer:
    common.seed_everything(args.seed, replicas.device)
    net = build_model(args.model)
    if args.channels_last:
        net = net.to(memory_format=torch.channels_last)
    net = net.to(replicas.device)
    autocast: nn.Module = net if args.amp == "none" else Autocast(net, replicas.device.type, AMP_DTYPES[args.amp])
    model = replicas.wrap(autocast)
    if args.compile:
        model = torch.compile(model)
    # DDP's forward may communicate, and test shards may differ in length: each process
    # evaluates its shard without DDP. DataParallel evaluates through its scatter, as E2 measured.
    eval_model = autocast if replicas.distributed else model
    optimizer = torch.optim.SGD(net.parameters(), lr=args.effective_lr, momentum=args.momentum, weight_decay=args.weight_decay)
    return Trainer(
        net=net, model=model, eval_model=eval_model, optimizer=optimizer, scheduler=build_scheduler(optimizer, args),
        scaler=torch.amp.GradScaler(replicas.device.type, enabled=args.amp == "fp16"), replicas=replicas, args=args,
    )


def build_scheduler(optimizer: torch.optim.Optimizer, args: argparse.Namespace):
    """Cosine annealing over the epochs, stepped per epoch (E2), after ``--warmup-epochs`` of linear warm-up (E3)."""
    from torch.optim import lr_scheduler  # noqa: PLC0415

    decay_epochs = args.epochs - args.warmup_epochs
    cosine = lr_scheduler.CosineAnnealingLR(optimizer, T_max=decay_epochs)
    if args.warmup_epochs == 0:
        return cosine
    warmup = lr_scheduler.LinearLR(optimizer, start_factor=1 / (args.warmup_epochs + 1), total_iters=args.warmup_epochs)
    return lr_scheduler.SequentialLR(optimizer, [warmup, cosine], milestones=[args.warmup_epochs])


def train_epoch(trainer: Trainer, loader, history: History, epoch: int) -> float:
    """One pass over this process's shard; returns the mean training loss over every process."""
    args, replicas = trainer.args, trainer.replicas
    trainer.model.train()
    common.set_loader_epoch(loader, epoch)  # DistributedSampler.set_epoch: a new order every epoch
    show = replicas.is_main and not args.quiet
    bar = common.progress(trainer.batches(loader), total=len(loader), desc=f"epoch {epoch + 1}/{args.epochs}", enabled=show)
    # Summed on the device and read once per epoch: a per-step .item() would sync every step.
    loss_sum = torch.zeros((), dtype=torch.float64, device=replicas.device)
    images_seen = 0
    timer = common.DeviceTimer(replicas.device)
    laps: list[float] = []
    for images, labels in bar:
        scatter = args.show_scatter and history.steps == 0
        with replica_calls(trainer.net) if scatter else contextlib.nullcontext() as calls:
            output = trainer.model(images)
        if scatter:
            common.print_lines(scatter_report(args, replicas, images, calls, output))
        loss = F.cross_entropy(output, labels)
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.scaler.scale(loss).backward()
        trainer.scaler.step(trainer.optimizer)
        trainer.scaler.update()
        loss_sum += loss.detach() * len(labels)
        images_seen += len(labels)
        history.steps += 1
        laps.append(timer.lap())
        if args.max_steps is not None and history.steps >= args.max_steps:
            break
    laps[-1] += timer.lap(sync=True)  # the epoch's queued work finishes in its last step
    history.iter_s.extend(laps)
    history.train_epoch_s.append(sum(laps))
    loss_total, count_total = replicas.sum_over_processes([loss_sum.item(), images_seen])
    history.train_images += int(count_total)
    return loss_total / count_total


def evaluate(trainer: Trainer, loader) -> float:
    """Accuracy over the whole test set: every process's unpadded shard, summed over processes."""
    replicas, model = trainer.replicas, trainer.eval_model
    if replicas.distributed:
        import torch.distributed as dist  # noqa: PLC0415

        # BatchNorm statistics drift apart in each process's last steps: evaluate everywhere
        # with rank 0's, the ones its checkpoint holds.
        for buffer in trainer.net.buffers():
            dist.broadcast(buffer, src=0)
    return common.global_accuracy(model, trainer.batches(loader), replicas.device, replicas.sum_over_processes)


# --------------------------------------------------------------------------- results


def configuration_record(args: argparse.Namespace) -> dict:
    return {
        "device": args.device,
        "cores": None,
        "strategy": None,
        "parallel": args.parallel,
        "world_size": args.world_size,
        "model": args.model,
        "global_batch": args.global_batch,
        "per_device_batch": args.per_device_batch,
        "image_size": args.image_size,
        "dataset": args.dataset,
    }


def write_results(args: argparse.Namespace, replicas: Replicas, history: History, started_at: str, total_s: float) -> None:
    metrics = {
        "test_accuracy": history.epoch_accuracy[-1],
        "final_loss": history.epoch_loss[-1],
        "images_per_s": history.train_images / sum(history.train_epoch_s),
        "epoch_loss": history.epoch_loss,
        "epoch_test_accuracy": history.epoch_accuracy,
        "epoch_lr": history.epoch_lr,
        "steps": history.steps,
        "epochs_completed": len(history.epoch_s),
    }
    results = common.build_results(
        recipe=RECIPE, run_name=args.run_name, started_at=started_at, settings=common.settings_record(args),
        configuration=configuration_record(args), timing=common.timing_record(history, total_s), metrics=metrics,
        environment=common.capture_environment(replicas.device, args.device),
    )
    path = common.write_results(args.results_dir, results)
    timing = results["timing"]
    print(
        f"{RECIPE} {results['run_name']}: {metrics['epochs_completed']} epochs, {history.steps} steps, "
        f"test accuracy {metrics['test_accuracy']:.4f}, {metrics['images_per_s']:.1f} images/s, "
        f"train {timing['train_epoch_s']['mean']:.2f} s/epoch, test {timing['test_epoch_s']['mean']:.2f} s/epoch, "
        f"total {timing['total_s']:.1f} s -> {path}"
    )


# --------------------------------------------------------------------------- run


def data_loaders(args: argparse.Namespace, replicas: Replicas):
    """Training and test loaders of this process's shard (rank 0 downloads, the others wait for it)."""
    if replicas.distributed and not replicas.is_main:
        import torch.distributed as dist  # noqa: PLC0415

        dist.barrier()
    train_set, test_set = load_data(args, download=args.download and replicas.is_main)
    if replicas.distributed and replicas.is_main:
        import torch.distributed as dist  # noqa: PLC0415

        dist.barrier()
    check_enough_images(args, train_set)
    # drop_last: a short final batch could leave BatchNorm one image per channel, and changes shapes under compile.
    train = common.batch_loader(train_set, args.process_batch, train=True, seed=args.seed,
                                rank=replicas.rank, world_size=replicas.world_size, drop_last=True)
    test = common.batch_loader(test_set, args.test_batch, train=False, seed=args.seed,
                               rank=replicas.rank, world_size=replicas.world_size)
    options = {"workers": args.workers, "pin_memory": args.pin_memory}
    return with_loader_options(train, **options), with_loader_options(test, **options)


def run(args: argparse.Namespace, replicas: Replicas) -> None:
    """Train, evaluate and checkpoint every epoch; the main process writes the results."""
    started_at = common.now_iso()
    started = time.perf_counter()
    resolve_auto_amp(args)
    checkpoint = checkpoint_file(args)
    saved = common.resume_checkpoint(PROG, checkpoint, common.resume_settings(args, RESUME_KEYS), announce=replicas.is_main) if args.resume else None

    train_loader, test_loader = data_loaders(args, replicas)
    trainer = build_trainer(args, replicas)
    history, first_epoch = History(), 0
    if saved is not None:
        trainer.net.load_state_dict(saved["model"])
        trainer.optimizer.load_state_dict(saved["optimizer"])
        trainer.scheduler.load_state_dict(saved["scheduler"])
        trainer.scaler.load_state_dict(saved["scaler"])
        common.restore_rng_states(saved["rng"], replicas.device)
        history, first_epoch = History(**saved["history"]), saved["epoch"]
    args.resumed_from_epoch = first_epoch if saved is not None else None

    for epoch in range(first_epoch, args.epochs):
        if args.max_steps is not None and history.steps >= args.max_steps:
            break
        epoch_start = time.perf_counter()
        history.epoch_lr.append(trainer.optimizer.param_groups[0]["lr"])
        history.epoch_loss.append(train_epoch(trainer, train_loader, history, epoch))
        test_start = time.perf_counter()
        history.epoch_accuracy.append(evaluate(trainer, test_loader))
        history.test_epoch_s.append(time.perf_counter() - test_start)
        history.epoch_s.append(time.perf_counter() - epoch_start)
        trainer.scheduler.step()
        if replicas.is_main:
            if not args.quiet:
                print(f"{PROG}: epoch {epoch + 1}/{args.epochs}: loss {history.epoch_loss[-1]:.4f}, "
                      f"test accuracy {history.epoch_accuracy[-1]:.4f}, train {history.train_epoch_s[-1]:.2f} s, "
                      f"test {history.test_epoch_s[-1]:.2f} s", file=sys.stderr)
            save_start = time.perf_counter()
            common.save_checkpoint(checkpoint, {
                "epoch": epoch + 1,
                "model": trainer.net.state_dict(),
                "optimizer": trainer.optimizer.state_dict(),
                "scheduler": trainer.scheduler.state_dict(),
                "scaler": trainer.scaler.state_dict(),
                "rng": common.rng_states(replicas.device),
                "history": {**vars(history), "elapsed_s": history.elapsed_s + time.perf_counter() - started},
                "training_settings": common.resume_settings(args, RESUME_KEYS),
            })
            history.checkpoint_s.append(time.perf_counter() - save_start)

    if not history.epoch_s:
        raise RecipeError(f"nothing to do: the checkpoint {checkpoint} already holds {first_epoch} epochs; start without --resume")
    if replicas.is_main:
        write_results(args, replicas, history, started_at, history.elapsed_s + time.perf_counter() - started)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.parallel != "ddp":
        run(args, local_replicas(args))
    elif not under_torchrun():
        raise SystemExit(relaunch_under_torchrun(args, argv))
    else:
        import torch.distributed as dist  # noqa: PLC0415

        replicas = distributed_replicas(args)
        try:
            run(args, replicas)
            # Leave together: a process that closes its gloo connections while rank 0 is
            # still writing results can be aborted ("terminate called without an active exception").
            dist.barrier()
        finally:
            dist.destroy_process_group()


if __name__ == "__main__":
    common.run_recipe(PROG, main)

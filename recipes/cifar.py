"""CIFAR-10 at 112 px on one device, with DataParallel, or with DistributedDataParallel (E2, E3).

    python recipes/cifar.py --dataset fake --epochs 2                # one CPU process
    python recipes/cifar.py --dataset fake --parallel ddp --nproc 2  # 2 gloo processes, torchrun
    python recipes/cifar.py --device cuda --gpus 1,2,3,4 --parallel dp --show-scatter
    python recipes/cifar.py --device cuda --gpus 0,1,2,3 --parallel ddp --model resnet50
    python recipes/cifar.py --device cuda --parallel ddp --nnodes 2 --rdzv-endpoint node1:29400
    torchrun --standalone --nproc_per_node=4 recipes/cifar.py --device cuda --parallel ddp

(The --nnodes line runs on each host.) Model (torchvision MobileNetV2 or ResNet50, 10 classes,
random weights), optimiser and schedule are E2's: SGD lr 0.1, momentum 0.9, weight decay 5e-4,
cosine annealing per epoch, global batch 256, 10 epochs. Fixed mistakes of the published
comparison: test images are resized like the training images, the training set is shuffled anew
every epoch, and loss and accuracy count every process.
Read it top down: the model, the loop (``Trainer``, shaped like pytorch/examples' DDP series),
``main``, then how ``--parallel`` spreads the work, the data and the command line.
"""

from __future__ import annotations

import argparse
import functools
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import ddp
import harness
import scatter
import speed
from harness import RecipeError

RECIPE, PROG = "cifar", "cifar.py"
MODELS = ("mobilenet_v2", "resnet50")
NUM_CLASSES = 10


def build_model(name: str) -> nn.Module:
    """torchvision's model with a 10-class head and random weights (nothing is downloaded)."""
    models = harness.import_optional("torchvision.models", "cifar.py", "torchvision")
    return getattr(models, name)(weights=None, num_classes=NUM_CLASSES)


class Trainer:
    """E2's training loop: the same for one device, DataParallel and DDP, which differ only in
    how ``replicas.wrap`` wraps the model."""

    def __init__(
        self, args: argparse.Namespace, replicas: Replicas, loaders: tuple, run: harness.Run
    ):
        self.args = args
        self.replicas = replicas
        self.run = run
        self.train_loader, self.test_loader = loaders
        memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
        # The network itself: checkpoints hold its weights.
        self.net = build_model(args.model).to(replicas.device, memory_format=memory_format)
        autocast = speed.with_amp(self.net, args, replicas.device)
        # What training calls (autocast, DataParallel/DDP, compile) and what evaluation calls:
        # DDP's forward may communicate and test shards may differ in length, so each DDP process
        # evaluates its shard without DDP. DataParallel evaluates through its scatter, as E2 did.
        self.model = replicas.wrap(autocast)
        if args.compile:
            self.model = torch.compile(self.model)
        self.eval_model = autocast if replicas.distributed else self.model
        self.optimizer = torch.optim.SGD(
            self.net.parameters(),
            lr=args.effective_lr,
            momentum=args.momentum,
            weight_decay=args.weight_decay,
        )
        self.scheduler = build_scheduler(self.optimizer, args)
        self.scaler = torch.amp.GradScaler(replicas.device.type, enabled=args.amp == "fp16")
        self.parts = {
            "model": self.net,
            "optimizer": self.optimizer,
            "scheduler": self.scheduler,
            "scaler": self.scaler,
        }
        # --resume: their states, the RNGs and the history so far.
        self.first_epoch = run.restore(self.parts)

    def _batches(self, loader):
        args = self.args
        device = self.replicas.device
        for images, labels in loader:
            yield prepare_batch(images, labels, device, args.image_size, args.channels_last)

    def _run_batch(
        self, images: torch.Tensor, labels: torch.Tensor, *, show_scatter: bool
    ) -> torch.Tensor:
        args = self.args
        output = scatter.forward(
            self.model,
            self.net,
            images,
            show=show_scatter,
            parallel=args.parallel,
            replicas=self.replicas,
            assumed_devices=args.nproc,
        )
        loss = F.cross_entropy(output, labels)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach()

    def _run_epoch(self, epoch: int) -> float:
        """One pass over this process's shard; returns the mean training loss over every process."""
        history = self.run.history
        self.model.train()
        harness.set_loader_epoch(self.train_loader, epoch)  # a new order every epoch
        bar = self.run.progress_bar(self._batches(self.train_loader), len(self.train_loader), epoch)
        # Summed on the device and read once per epoch: a per-step .item() would sync every step.
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.replicas.device)
        images_seen = 0
        timer = harness.StepTimer(self.replicas.device)
        for step, (images, labels) in enumerate(bar, 1):
            show_scatter = self.args.show_scatter and history.steps == 0
            loss = self._run_batch(images, labels, show_scatter=show_scatter)
            loss_sum += loss * len(labels)
            images_seen += len(labels)
            timer.lap()
            bar.show_loss(loss, step)
            history.steps += 1
            if self.run.out_of_steps():  # --max-steps
                break
        history.add_training(timer.stop())  # the epoch's one device sync
        sums = [loss_sum.item(), images_seen]
        loss_total, count_total = self.replicas.sum_over_processes(sums)
        history.train_images += int(count_total)
        return loss_total / count_total

    def evaluate(self) -> float:
        """Accuracy over the whole test set: every process's unpadded shard, summed over
        processes."""
        if self.replicas.distributed:
            # BatchNorm statistics drift apart in each process: evaluate everywhere with rank 0's,
            # which its checkpoint holds.
            for buffer in self.net.buffers():
                torch.distributed.broadcast(buffer, src=0)
        test_batches = self._batches(self.test_loader)
        return harness.global_accuracy(self.eval_model, test_batches, self.replicas)

    def train(self) -> None:
        for epoch in range(self.first_epoch, self.args.epochs):
            if self.run.out_of_steps():
                break
            self.run.start_epoch()
            loss = self._run_epoch(epoch)
            self.run.start_test()
            accuracy = self.evaluate()
            lr = self.optimizer.param_groups[0]["lr"]
            self.run.end_epoch(epoch, lr=lr, loss=loss, accuracy=accuracy)
            self.scheduler.step()
            self.run.save_checkpoint(self.parts, epoch + 1)


def build_scheduler(optimizer: torch.optim.Optimizer, args: argparse.Namespace):
    """Cosine annealing over the epochs, stepped per epoch (E2), after ``--warmup-epochs`` of
    linear warm-up (E3)."""
    lr_scheduler = torch.optim.lr_scheduler
    cosine = lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs - args.warmup_epochs)
    if args.warmup_epochs == 0:
        return cosine
    warmup = lr_scheduler.LinearLR(
        optimizer, start_factor=1 / (args.warmup_epochs + 1), total_iters=args.warmup_epochs
    )
    return lr_scheduler.SequentialLR(optimizer, [warmup, cosine], milestones=[args.warmup_epochs])


def train(args: argparse.Namespace, replicas: Replicas) -> None:
    speed.resolve_auto_amp(args)
    # Seeds, before the model exists.
    run = harness.Run(args, replicas, recipe=RECIPE, prog=PROG, resume_keys=RESUME_KEYS)
    Trainer(args, replicas, data_loaders(args, replicas), run).train()
    history = run.history
    configuration = harness.configuration_record(
        args, replicas, model=args.model, image_size=args.image_size, parallel=args.parallel
    )
    images_per_s = history.train_images / sum(history.train_epoch_s)
    run.write_results(configuration, {"images_per_s": images_per_s, "epoch_lr": history.epoch_lr})


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.parallel != "ddp":
        train(args, local_replicas(args))
    elif not ddp.under_torchrun():
        raise SystemExit(relaunch_under_torchrun(args, argv))
    else:  # one of torchrun's processes
        ddp.in_process_group(
            args.device, lambda fields: train(args, Replicas(**fields, parallel="ddp"))
        )


# ------------------------------------------------------------------ how --parallel spreads work
# nn.DataParallel scatters each batch over CUDA GPUs; without them it calls the module once, which
# is no DataParallel run to record. The tests add "cpu" to check the dp wiring (wrap, checkpoint,
# --show-scatter) without GPUs.
DATA_PARALLEL_DEVICES = ("cuda",)
DEFAULT_CPU_PROCESSES = 2


@dataclass
class Replicas(harness.Replicas):
    """harness.Replicas, and how ``--parallel`` wraps the model."""

    parallel: str = "none"

    @property
    def distributed(self) -> bool:
        return self.parallel == "ddp"

    def wrap(self, model: nn.Module) -> nn.Module:
        """The model as training calls it: plain, DataParallel over the visible GPUs, or DDP."""
        if self.parallel == "dp":
            return nn.DataParallel(model)  # every visible GPU; on CPU it calls the module directly
        if self.parallel == "ddp":
            device_ids = [self.local_rank] if self.device.type == "cuda" else None
            return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
        return model


def local_replicas(args: argparse.Namespace) -> Replicas:
    """cpu or cuda in this process (none, or dp: one process feeding every visible GPU)."""
    device = harness.select_device(args.device)
    return Replicas(device, replicas=args.world_size, parallel=args.parallel)


def relaunch_under_torchrun(args: argparse.Namespace, argv: list[str]) -> int:
    """Start this script under torchrun; checked here first, bad data or checkpoints are one
    line, not one per process."""
    check_enough_images(args, load_data(args, download=args.download)[0])
    # "auto" AMP is settled in the training processes, which check there.
    if args.resume and args.amp != "auto":
        checkpointer = harness.Checkpointer(args, recipe=RECIPE, resume_keys=RESUME_KEYS)
        checkpointer.resume(PROG, announce=False)
    if args.nnodes > 1:  # check_hosts made sure of an endpoint
        ddp.check_rendezvous(args.rdzv_endpoint, args.rdzv_timeout)
    command = ddp.torchrun_command(args, str(Path(__file__).resolve()), argv)
    if not args.quiet:
        torchrun_args = " ".join(command[3 : command.index("--")])
        print(
            f"{PROG}: starting {args.world_size} processes: torchrun {torchrun_args} ...",
            file=sys.stderr,
        )
    return subprocess.run(command, env=ddp.torchrun_env(args.device), check=False).returncode


# ------------------------------------------------------------------ data
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def cifar_split(
    data_dir: Path, *, train: bool, download: bool, data_check: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """One CIFAR-10 split as uint8 images [N, 3, 32, 32] and int64 labels, read by torchvision.

    ``data_check="exists"``: expected md5s of None, which torchvision reads as "the file exists",
    so copies that are not the official files (as tests write) load through torchvision's reader."""
    cifar10 = harness.import_optional(
        "torchvision.datasets", "--dataset real", "torchvision", instead="--dataset fake"
    ).CIFAR10
    if data_check == "exists":
        cifar10 = type(
            "ExistenceCheckedCIFAR10",
            (cifar10,),
            {
                "train_list": [[name, None] for name, _ in cifar10.train_list],
                "test_list": [[name, None] for name, _ in cifar10.test_list],
                "meta": {**cifar10.meta, "md5": None},
            },
        )
    check = " or fails torchvision's md5 check," if data_check == "md5" else ""
    dataset = harness.open_dataset(
        cifar10,
        data_dir,
        "cifar-10-batches-py",
        train=train,
        download=download,
        missing=f"CIFAR-10 is not under {data_dir}/cifar-10-batches-py{check}",
        fix="put the python-version batches there",
    )
    return torch.from_numpy(dataset.data).permute(0, 3, 1, 2).contiguous(), torch.tensor(
        dataset.targets, dtype=torch.int64
    )


def fake_images(count: int, *, seed: int, sample_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Learnable stand-in for CIFAR-10: uint8 32 px images, class templates (from ``seed``) plus
    per-image noise, drawn at 8x8 and smoothed up to 32 px, so the class patterns survive resizing
    and global pooling."""
    coarse, labels = harness.fake_split(
        count, (3, 8, 8), NUM_CLASSES, template_seed=seed, sample_seed=sample_seed, noise=0.5
    )
    images = F.interpolate(coarse, size=(32, 32), mode="bilinear", align_corners=False)
    # Real pixels' range, so fake data takes the same uint8 -> normalise -> resize path.
    return (128 + 40 * images).round().clamp(0, 255).to(torch.uint8), labels


def load_data(
    args: argparse.Namespace, *, download: bool
) -> tuple[harness.IndexBatchDataset, harness.IndexBatchDataset]:
    """Train and test sets as in-memory uint8 tensors (real CIFAR-10 or the seeded fake set: same
    templates, other images)."""
    if args.dataset == "fake":
        splits = [
            fake_images(size, seed=args.seed, sample_seed=args.seed + offset)
            for size, offset in ((args.fake_train_size, 1), (args.fake_test_size, 2))
        ]
    else:
        splits = [
            cifar_split(
                args.data_dir, train=train, download=download and train, data_check=args.data_check
            )
            for train in (True, False)
        ]
    return harness.IndexBatchDataset(*splits[0]), harness.IndexBatchDataset(*splits[1])


def check_enough_images(args: argparse.Namespace, train_set: harness.IndexBatchDataset) -> None:
    """RecipeError unless every process gets at least one full training batch (short ones are
    dropped)."""
    shards = args.world_size if args.parallel == "ddp" else 1
    if math.ceil(len(train_set) / shards) < args.process_batch:
        raise RecipeError(
            f"{len(train_set)} training images give each of {shards} process(es) less than one "
            f"batch of {args.process_batch}; use a smaller batch or more data"
        )


def data_loaders(args: argparse.Namespace, replicas: Replicas):
    """This process's training and test loaders; each host's first process downloads, the others
    wait for it."""
    if replicas.distributed and replicas.local_rank != 0:
        torch.distributed.barrier()
    train_set, test_set = load_data(args, download=args.download and replicas.local_rank == 0)
    if replicas.distributed and replicas.local_rank == 0:
        torch.distributed.barrier()
    check_enough_images(args, train_set)
    loaders = harness.shard_loaders(
        train_set,
        test_set,
        replicas,
        batch=args.process_batch,
        test_batch=args.test_batch,
        seed=args.seed,
    )
    return tuple(speed.with_loader_options(loader, args) for loader in loaders)


@functools.cache
def normalisation(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """CIFAR-10's channel mean and std on ``device``, made once: a per-step host-to-GPU copy would
    stall the step."""
    return (
        torch.tensor(CIFAR_MEAN, device=device).view(1, 3, 1, 1),
        torch.tensor(CIFAR_STD, device=device).view(1, 3, 1, 1),
    )


def prepare_batch(
    images: torch.Tensor,
    labels: torch.Tensor,
    device: torch.device,
    image_size: int,
    channels_last: bool,
):
    """uint8 32 px batch -> normalised float batch at ``image_size`` on ``device``.

    Resizing on the device, after the copy, moves ~50x fewer bytes than copying 112 px floats,
    and is one function for training and test, so both always see the same size (E2's
    original evaluated at 32 px while training at 112)."""
    images = images.to(device, non_blocking=True).float().div_(255)
    if images.shape[-1] != image_size:
        images = F.interpolate(
            images, size=(image_size, image_size), mode="bilinear", align_corners=False
        )
    mean, std = normalisation(images.device)
    images = (images - mean) / std
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    return images, labels.to(device, non_blocking=True)


# ------------------------------------------------------------------ command line
# The global batch E2's learning rate belongs to; --lr-scaling linear scales from it.
REFERENCE_BATCH = 256
# Settings a checkpoint must share with the run that resumes it. The cosine schedule depends on the
# epoch count.
RESUME_KEYS = (
    "device",
    "parallel",
    "world_size",
    "model",
    "image_size",
    "dataset",
    "seed",
    "epochs",
    "global_batch",
    "per_device_batch",
    "lr",
    "lr_scaling",
    "effective_lr",
    "warmup_epochs",
    "momentum",
    "weight_decay",
    "amp",
    "channels_last",
    "fake_train_size",
    "fake_test_size",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = harness.RecipeArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    harness.add_common_arguments(parser, default_epochs=10)
    add = parser.add_argument
    add(
        "--model",
        choices=MODELS,
        default="mobilenet_v2",
        help="torchvision model, 10 classes (default: mobilenet_v2)",
    )
    add(
        "--image-size",
        type=harness.positive_int,
        default=112,
        help="side the 32 px images are resized to, for training and test alike (default: 112)",
    )
    add(
        "--parallel",
        choices=("none", "dp", "ddp"),
        default="none",
        help="none: one device; dp: nn.DataParallel in one process; ddp: DistributedDataParallel, "
        "one process per device under torchrun (default: none)",
    )
    add(
        "--gpus",
        help="cuda: comma-separated GPU ids, e.g. 1,2,3,4; sets CUDA_VISIBLE_DEVICES before CUDA "
        "starts",
    )
    add(
        "--nproc",
        type=harness.positive_int,
        help=f"cpu: ddp processes per host (default: {DEFAULT_CPU_PROCESSES})",
    )
    ddp.add_host_arguments(parser)
    harness.add_batch_arguments(
        parser,
        reference_batch=REFERENCE_BATCH,
        default="global",
        optimizer="SGD",
        lr=0.1,
        lr_scaling="none",
    )
    add(
        "--test-batch",
        type=harness.positive_int,
        help="evaluation batch per process (default: the per-process training batch)",
    )
    add("--momentum", type=float, default=0.9, help="SGD momentum (default: 0.9)")
    add("--weight-decay", type=float, default=5e-4, help="SGD weight decay (default: 5e-4)")
    speed.add_speed_arguments(parser)
    add(
        "--show-scatter",
        action="store_true",
        help="print how the first batch is split over the replicas and the gathered output size",
    )
    add(
        "--data-check",
        choices=("md5", "exists"),
        default="md5",
        help="real data: md5 = torchvision's checksum check of the official files; exists = only "
        "check the files are there (for re-encoded or test copies) (default: md5)",
    )
    harness.add_fake_data_arguments(parser, train=1024, test=256)
    args = harness.parse_arguments(parser, argv)
    harness.import_optional("torchvision", "cifar.py (its models)", "torchvision")
    resolve_topology(args)
    harness.resolve_batches(
        args, args.world_size, reference_batch=REFERENCE_BATCH, default="global"
    )
    # DataParallel splits the global batch inside one process; every other mode feeds each process
    # its share.
    args.process_batch = args.global_batch if args.parallel == "dp" else args.per_device_batch
    args.test_batch = args.test_batch or args.process_batch
    if args.warmup_epochs >= args.epochs:
        raise RecipeError(
            f"--warmup-epochs {args.warmup_epochs} leaves no epoch for the decay; use fewer than "
            f"--epochs {args.epochs}"
        )
    speed.apply_preset(args)
    # Model and batch in the name: E2 compares both, and their runs must not take each other's
    # names.
    args.run_name = (
        args.run_name
        or f"{args.model}-b{args.global_batch}-"
        + harness.default_run_name(args.device, world_size=args.world_size, parallel=args.parallel)
    )
    return args


def resolve_topology(args: argparse.Namespace) -> None:
    """Set ``args.world_size`` (replicas the global batch is split over) and check the device
    options fit together."""
    if args.gpus is not None and args.device != "cuda":
        raise RecipeError(
            f"--gpus applies to --device cuda only; --device {args.device} has no GPUs to choose"
        )
    if args.nproc is not None and not (args.device == "cpu" and args.parallel != "none"):
        raise RecipeError(
            "--nproc applies to --device cpu with --parallel ddp; on cuda the GPU count comes "
            "from --gpus"
        )
    if args.device == "tpu":
        raise RecipeError(
            "--device tpu is not supported by the cifar recipe; use cpu or cuda (the TPU "
            "comparison is mnist.py)"
        )
    if args.parallel == "dp" and args.device not in DATA_PARALLEL_DEVICES:
        raise RecipeError(
            "--parallel dp needs CUDA GPUs (nn.DataParallel splits each batch over them), and "
            f"--device {args.device} has none; use --parallel ddp for several processes, or none"
        )
    ddp.check_hosts(args)
    if args.device == "cpu":
        args.nproc = args.nproc or DEFAULT_CPU_PROCESSES if args.parallel != "none" else None
        # DataParallel without GPUs runs the module once on the whole batch: one replica.
        per_node = args.nproc if args.parallel == "ddp" else 1
    else:
        if args.gpus is not None:
            harness.choose_gpus(args.gpus)
        count = torch.cuda.device_count()
        if count == 0:
            harness.select_device("cuda")  # raises the one-line "no GPU visible" error
        if args.parallel == "none" and count > 1 and args.gpus is not None:
            raise RecipeError(
                f"--parallel none trains on one GPU but --gpus lists {count}; list one GPU, or use "
                "--parallel dp or ddp"
            )
        per_node = 1 if args.parallel == "none" else count
    args.world_size = per_node * args.nnodes
    if ddp.under_torchrun():
        if args.parallel != "ddp":
            raise RecipeError(f"running under torchrun needs --parallel ddp, not {args.parallel}")
        # torchrun's own settings count when a user (or a Kubernetes operator) starts torchrun.
        args.world_size, args.nnodes = ddp.torchrun_topology()
    if args.parallel == "ddp" and args.world_size < 2:
        raise RecipeError(
            f"--parallel ddp needs at least 2 devices, got {args.world_size}; use --parallel none "
            "for one device, or give more GPUs (--gpus), processes (--nproc) or hosts (--nnodes)"
        )


if __name__ == "__main__":
    harness.run_recipe(PROG, main)

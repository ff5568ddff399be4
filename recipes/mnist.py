"""MNIST on a CPU, a GPU, one TPU core or every TPU core, timed the same way (experiment E1).

    python recipes/mnist.py --device cpu --dataset fake --epochs 2
    python recipes/mnist.py --device cuda
    python recipes/mnist.py --device tpu --cores 1
    python recipes/mnist.py --device tpu --cores all                    # one process per core
    python recipes/mnist.py --device tpu --cores all --strategy spmd    # one process, SPMD data parallel
    PJRT_DEVICE=CPU CPU_NUM_DEVICES=2 python recipes/mnist.py --device tpu --strategy spmd   # dry run on CPU

Network, optimiser and schedule are the PyTorch MNIST example's (Adadelta 1.0,
StepLR 0.7, batch 128, 10 epochs). Fixed mistakes of the published comparison:
no ``.item()`` per step, the learning rate follows the global batch (E3), and
test accuracy is counted over the whole test set, not one replica's shard.
``--per-device-batch`` / ``--global-batch`` and ``--lr-scaling`` / ``--warmup-epochs``
make the E3 scaling rule explicit; ``settings`` records what was used.
Writes ``<results-dir>/mnist-<run-name>.json`` and a checkpoint every epoch
(``--resume`` continues from it; on CPU with a fixed seed, bit-identically).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import torch
import torch.nn as nn
import torch.nn.functional as F

import common
from common import RecipeError

RECIPE = "mnist"
PROG = "mnist.py"
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
IMAGE_SHAPE = (1, 28, 28)
NUM_CLASSES = 10
# Noise (per pixel, templates have std 1) that makes the fake set take a few epochs
# to learn, so fake-data accuracies show training working rather than 100% at once.
FAKE_NOISE = 4.0
# The batch that E1's learning rate was tuned for; --lr-scaling linear scales from it.
REFERENCE_BATCH = 128
# Settings a checkpoint must share with the run that resumes it (epochs may grow).
RESUME_KEYS = (
    "device", "strategy", "world_size", "dataset", "seed", "per_device_batch", "global_batch",
    "lr", "lr_scaling", "effective_lr", "gamma", "warmup_epochs", "fake_train_size", "fake_test_size",
)


class Net(nn.Module):
    """The PyTorch MNIST example network of E1."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


# --------------------------------------------------------------------------- arguments


def build_parser() -> argparse.ArgumentParser:
    parser = common.RecipeArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    common.add_common_arguments(parser, default_epochs=10)
    parser.add_argument("--cores", choices=("1", "all"), default=None,
                        help="tpu only: one core, or all cores (default: 1, or all for --strategy xmp/spmd)")
    parser.add_argument("--strategy", choices=("single", "xmp", "spmd"), default=None,
                        help="tpu only: single core; xmp = one process per core (torch_xla.launch); "
                             "spmd = one process sharding each batch over all devices")
    batch = parser.add_mutually_exclusive_group()
    batch.add_argument("--per-device-batch", type=common.positive_int, default=None,
                       help=f"batch per device/replica (default: {REFERENCE_BATCH})")
    batch.add_argument("--global-batch", type=common.positive_int, default=None,
                       help="batch over all replicas; must divide by the replica count")
    parser.add_argument("--test-batch", type=common.positive_int, default=1000, help="evaluation batch per replica (default: 1000)")
    parser.add_argument("--lr", type=common.positive_float, default=1.0, help="Adadelta learning rate at the reference batch (default: 1.0)")
    parser.add_argument("--lr-scaling", choices=("linear", "none"), default="linear",
                        help=f"linear: lr x global batch / {REFERENCE_BATCH} (E3); none: --lr as given (default: linear)")
    parser.add_argument("--gamma", type=common.positive_float, default=0.7, help="learning-rate decay per epoch (default: 0.7)")
    parser.add_argument("--warmup-epochs", type=common.non_negative_int, default=0,
                        help="ramp the learning rate up linearly over this many epochs before decaying it; "
                             "large scaled batches need it (E3) (default: 0, as E1)")
    parser.add_argument("--fake-train-size", type=common.positive_int, default=3840, help="--dataset fake: training images (default: 3840)")
    parser.add_argument("--fake-test-size", type=common.positive_int, default=1000, help="--dataset fake: test images (default: 1000)")
    parser.add_argument("--log-every", type=common.positive_int, default=50,
                        help="steps between loss updates on the progress bar (default: 50)")
    return parser


def resolve_topology(args: argparse.Namespace) -> None:
    """Fill ``args.cores`` / ``args.strategy`` from each other; RecipeError on combinations that make no sense."""
    if args.device != "tpu":
        for option, value in (("--cores", args.cores), ("--strategy", args.strategy)):
            if value is not None:
                raise RecipeError(f"{option} applies to --device tpu only; --device {args.device} trains on one device")
        return
    if args.strategy is None:
        args.strategy = "xmp" if args.cores == "all" else "single"
    if args.cores is None:
        args.cores = "1" if args.strategy == "single" else "all"
    if (args.cores == "1") != (args.strategy == "single"):
        raise RecipeError(
            f"--cores {args.cores} does not fit --strategy {args.strategy}: "
            "--strategy single uses one core, xmp and spmd use all cores"
        )


def resolve_batches(args: argparse.Namespace, world_size: int) -> None:
    """Per-device and global batch and the learning rate they imply (E3), recorded on ``args``."""
    if args.global_batch is not None:
        if args.global_batch % world_size:
            raise RecipeError(f"--global-batch {args.global_batch} does not divide over {world_size} replicas")
        args.per_device_batch = args.global_batch // world_size
    else:
        args.per_device_batch = args.per_device_batch or REFERENCE_BATCH
        args.global_batch = args.per_device_batch * world_size
    args.world_size = world_size
    scale = args.global_batch / REFERENCE_BATCH if args.lr_scaling == "linear" else 1.0
    args.effective_lr = args.lr * scale


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    resolve_topology(args)
    if args.run_name is not None:
        common.check_run_name(args.run_name)
    if args.device == "tpu":
        common.import_torch_xla()
    return args


# --------------------------------------------------------------------------- data


def mnist_split(data_dir: Path, *, train: bool, download: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """torchvision's MNIST split as normalised float images [N,1,28,28] and labels.

    Normalising the whole split once replaces the per-sample ToTensor/Normalize
    transforms (same values), so training batches are single tensor gathers.
    """
    try:
        from torchvision.datasets import MNIST  # noqa: PLC0415 - images for fake data have no torchvision
    except ImportError:
        raise RecipeError("--dataset real needs torchvision, which is not installed here; use --dataset fake") from None
    try:
        dataset = MNIST(str(data_dir), train=train, download=download)
    except (RuntimeError, OSError) as exc:
        how = "the download failed" if download else "downloading is off (--no-download)"
        raise RecipeError(
            f"MNIST is not under {data_dir}/MNIST/raw and {how} ({' '.join(str(exc).split())[:120]}); "
            "put the four idx files there, allow the download, or use --dataset fake"
        ) from None
    if download:
        common.chown_tree(Path(data_dir) / "MNIST")
    return normalize(dataset.data), dataset.targets


def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8 [N,28,28] -> float [N,1,28,28], the values ToTensor() + Normalize(mean, std) give per sample."""
    return (images.unsqueeze(1).float() / 255 - MNIST_MEAN) / MNIST_STD


def load_data(args: argparse.Namespace) -> tuple[common.IndexBatchDataset, common.IndexBatchDataset]:
    """Train and test sets as in-memory tensors (real MNIST or the seeded fake set)."""
    if args.dataset == "fake":
        # Same templates (classes) for both splits, different samples.
        train = common.fake_split(args.fake_train_size, IMAGE_SHAPE, NUM_CLASSES, template_seed=args.seed, sample_seed=args.seed + 1, noise=FAKE_NOISE)
        test = common.fake_split(args.fake_test_size, IMAGE_SHAPE, NUM_CLASSES, template_seed=args.seed, sample_seed=args.seed + 2, noise=FAKE_NOISE)
    else:
        train = mnist_split(args.data_dir, train=True, download=args.download)
        test = mnist_split(args.data_dir, train=False, download=False)
    return common.IndexBatchDataset(*train), common.IndexBatchDataset(*test)


# --------------------------------------------------------------------------- backends


@dataclass
class Backend:
    """How one process trains: its device, its shard of the data, and the device-specific steps."""

    device: torch.device
    world_size: int = 1  # replicas the global batch is split over
    data_rank: int = 0  # this process's data shard ...
    data_shards: int = 1  # ... of this many (1 for SPMD: one process feeds every device)
    step_optimizer: Callable[[torch.optim.Optimizer], None] = lambda optimizer: optimizer.step()
    to_device: Callable[[Iterable], Iterable] | None = None
    sum_over_replicas: Callable[[list[float]], list[float]] = lambda values: values
    is_main: bool = True
    # Keep the whole dataset on the device and gather batches there: no host-to-device
    # copy per step. Not with MpDeviceLoader, which copies in background threads and
    # needs host tensors to shard.
    preload: bool = False

    @property
    def xla(self) -> bool:
        return common.is_xla(self.device)

    def batches(self, loader) -> Iterable:
        if self.to_device is not None:
            return self.to_device(loader)
        return ((x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)) for x, y in loader)

    def after_step(self, callback: Callable[[torch.Tensor], None], tensor: torch.Tensor) -> None:
        """Run ``callback(tensor)`` once the step's value exists, without an extra sync on XLA."""
        if self.xla:
            import torch_xla.core.xla_model as xm  # noqa: PLC0415

            xm.add_step_closure(callback, args=(tensor,))
        else:
            callback(tensor)


def eager_backend(device_kind: str) -> Backend:
    """cpu or cuda: plain PyTorch on one device."""
    device = common.select_device(device_kind)
    return Backend(device=device, preload=device.type == "cuda")


def single_core_backend() -> Backend:
    """One XLA device; the step ends with a barrier that runs the lazy graph (E1)."""
    import torch_xla.core.xla_model as xm  # noqa: PLC0415

    return Backend(
        device=common.select_device("tpu"),
        step_optimizer=lambda optimizer: xm.optimizer_step(optimizer, barrier=True),
        preload=True,
    )


def xmp_backend() -> Backend:
    """One process per XLA device: sharded data, all-reduced gradients, accuracy summed over replicas."""
    import torch_xla.core.xla_model as xm  # noqa: PLC0415
    import torch_xla.distributed.parallel_loader as pl  # noqa: PLC0415
    import torch_xla.runtime as xr  # noqa: PLC0415

    device = common.select_device("tpu")
    world, rank = xr.world_size(), xr.global_ordinal()
    return Backend(
        device=device,
        world_size=world,
        data_rank=rank,
        data_shards=world,
        # The loader marks the step after each batch, so no barrier here.
        step_optimizer=xm.optimizer_step,
        to_device=lambda loader: pl.MpDeviceLoader(loader, device),
        sum_over_replicas=lambda values: xm.mesh_reduce("mnist_sums", values, lambda all_: [sum(c) for c in zip(*all_)]),
        is_main=xm.is_master_ordinal(local=False),
    )


def spmd_backend() -> Backend:
    """One process; each batch is sharded over every XLA device along a 1-D 'data' mesh."""
    import numpy as np  # noqa: PLC0415 - a torch_xla dependency
    import torch_xla.distributed.parallel_loader as pl  # noqa: PLC0415
    import torch_xla.distributed.spmd as xs  # noqa: PLC0415
    import torch_xla.runtime as xr  # noqa: PLC0415

    xr.use_spmd()
    devices = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(devices), (devices,), ("data",))
    # Images are split along the batch; labels (1-D, so the spec does not apply) are replicated.
    sharding = xs.ShardingSpec(mesh, ("data", None, None, None))
    device = common.select_device("tpu")
    return Backend(
        device=device,
        world_size=devices,
        to_device=lambda loader: pl.MpDeviceLoader(loader, device, input_sharding=sharding),
    )


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class WarmupThenDecay:
    """Learning-rate factor per epoch: a linear ramp over ``warmup`` epochs (1/(w+1) ... w/(w+1)),
    then ``gamma`` ** (epochs since the ramp). With no warm-up this is E1's StepLR(step_size=1, gamma)."""

    warmup: int
    gamma: float

    def __call__(self, epoch: int) -> float:
        if epoch < self.warmup:
            return (epoch + 1) / (self.warmup + 1)
        return self.gamma ** (epoch - self.warmup)


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
    compilations: list = field(default_factory=list)  # XLA compilations after each epoch
    steps: int = 0
    elapsed_s: float = 0.0  # wall time of earlier (interrupted) segments


def xla_compilations() -> int:
    """How many graphs torch_xla has compiled in this process so far."""
    import torch_xla.debug.metrics as met  # noqa: PLC0415

    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


def train_epoch(model, optimizer, loader, backend: Backend, args, history: History, epoch: int) -> float:
    """One pass over this process's shard; returns the mean training loss (summed over replicas)."""
    model.train()
    common.set_loader_epoch(loader, epoch)
    show = backend.is_main and not args.quiet
    steps = len(loader) if args.max_steps is None else min(len(loader), args.max_steps - history.steps)
    bar = common.progress(backend.batches(loader), total=steps, desc=f"epoch {epoch + 1}/{args.epochs}", enabled=show)
    # Kept on the device and read once per epoch: a per-step .item() would sync every
    # step. A list rather than a running sum keeps every step's XLA graph identical
    # (a sum started from zeros makes each epoch's first step a new graph).
    losses = []
    timer = common.DeviceTimer(backend.device)
    laps = []
    for images, labels in bar:
        optimizer.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(images), labels)
        loss.backward()
        backend.step_optimizer(optimizer)
        losses.append(loss.detach())
        history.steps += 1
        if show and len(losses) % args.log_every == 0:
            backend.after_step(lambda value: bar.set_postfix(loss=f"{value.item():.4f}"), loss.detach())
        laps.append(timer.lap())
        if args.max_steps is not None and history.steps >= args.max_steps:
            break
    laps[-1] += timer.lap(sync=True)  # the epoch's queued work finishes in its last step
    history.iter_s.extend(laps)
    history.train_epoch_s.append(sum(laps))
    loss_total, step_total = backend.sum_over_replicas([torch.stack(losses).sum().item(), len(losses)])
    return loss_total / step_total


def evaluate(model, loader, backend: Backend) -> float:
    """Accuracy over the whole test set (every replica's shard counted once)."""
    return common.global_accuracy(model, backend.batches(loader), backend.device, backend.sum_over_replicas)


def configuration_record(args: argparse.Namespace) -> dict:
    return {
        "device": args.device,
        "cores": (1 if args.cores == "1" else args.world_size) if args.device == "tpu" else None,
        "strategy": args.strategy,
        "parallel": None,
        "world_size": args.world_size,
        "model": "mnist-net",
        "global_batch": args.global_batch,
        "per_device_batch": args.per_device_batch,
        "image_size": IMAGE_SHAPE[-1],
        "dataset": args.dataset,
    }


def build_loaders(args: argparse.Namespace, backend: Backend):
    """This process's training and test loaders of pre-collated batches."""
    train_set, test_set = load_data(args)
    if backend.preload:  # MNIST (~200 MB as floats) fits in any accelerator's memory
        train_set, test_set = train_set.to(backend.device), test_set.to(backend.device)
    # SPMD: one process loads whole global batches and the loader shards them over the devices.
    loader_batch = args.global_batch if backend.data_shards == 1 else args.per_device_batch
    train_loader = common.batch_loader(train_set, loader_batch, train=True, seed=args.seed,
                                       rank=backend.data_rank, world_size=backend.data_shards, drop_last=True)
    test_loader = common.batch_loader(test_set, args.test_batch, train=False, seed=args.seed,
                                      rank=backend.data_rank, world_size=backend.data_shards)
    if len(train_loader) == 0:
        raise RecipeError(
            f"no training step: {len(train_loader.sampler.sampler)} training images per data shard is less than "
            f"one batch of {loader_batch}; use a smaller batch or more data"
        )
    return train_loader, test_loader


def run(backend: Backend, args: argparse.Namespace) -> None:
    """Train, evaluate every epoch, checkpoint every epoch, and write the results (main process)."""
    started_at = common.now_iso()
    started = time.perf_counter()
    resolve_batches(args, backend.world_size)
    run_name = args.run_name or common.default_run_name(args.device, world_size=args.world_size, strategy=args.strategy)
    checkpoint_dir = args.checkpoint_dir or args.results_dir / "checkpoints"
    args.run_name, args.checkpoint_dir = run_name, checkpoint_dir
    checkpoint = common.checkpoint_path(checkpoint_dir, RECIPE, run_name)
    saved = (common.resume_checkpoint(PROG, checkpoint, common.resume_settings(args, RESUME_KEYS), announce=backend.is_main)
             if args.resume else None)

    common.seed_everything(args.seed, backend.device)
    train_loader, test_loader = build_loaders(args, backend)
    model = Net().to(backend.device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.effective_lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupThenDecay(args.warmup_epochs, args.gamma))
    history, first_epoch = History(), 0
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        common.restore_rng_states(saved["rng"], backend.device)
        history, first_epoch = History(**saved["history"]), saved["epoch"]
    if backend.data_shards > 1:
        import torch_xla.core.xla_model as xm  # noqa: PLC0415

        xm.broadcast_master_param(model)
    args.resumed_from_epoch = first_epoch if saved is not None else None

    for epoch in range(first_epoch, args.epochs):
        if args.max_steps is not None and history.steps >= args.max_steps:
            break
        epoch_start = time.perf_counter()
        history.epoch_loss.append(train_epoch(model, optimizer, train_loader, backend, args, history, epoch))
        test_start = time.perf_counter()
        history.epoch_accuracy.append(evaluate(model, test_loader, backend))
        history.test_epoch_s.append(time.perf_counter() - test_start)
        history.epoch_s.append(time.perf_counter() - epoch_start)
        if backend.xla:
            history.compilations.append(xla_compilations())
        scheduler.step()
        if backend.is_main:
            save_start = time.perf_counter()
            common.save_checkpoint(checkpoint, {
                "epoch": epoch + 1,
                "sampler_epoch": epoch + 1,  # the next epoch's shuffle (DistributedSampler.set_epoch)
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": common.rng_states(backend.device),
                "history": {**vars(history), "elapsed_s": history.elapsed_s + time.perf_counter() - started},
                "training_settings": common.resume_settings(args, RESUME_KEYS),
            })
            history.checkpoint_s.append(time.perf_counter() - save_start)

    if not history.epoch_s:
        raise RecipeError(f"nothing to do: the checkpoint {checkpoint} already holds {first_epoch} epochs; raise --epochs")
    if backend.is_main:
        write_results(args, backend, history, run_name, started_at, history.elapsed_s + time.perf_counter() - started)


def write_results(args, backend: Backend, history: History, run_name: str, started_at: str, total_s: float) -> None:
    metrics = {
        "test_accuracy": history.epoch_accuracy[-1],
        "final_loss": history.epoch_loss[-1],
        "epoch_loss": history.epoch_loss,
        "epoch_test_accuracy": history.epoch_accuracy,
        "steps": history.steps,
        "epochs_completed": len(history.epoch_s),
    }
    if backend.xla:
        metrics["xla_compilations"] = history.compilations[-1]
        metrics["xla_compilations_per_epoch"] = history.compilations
    results = common.build_results(
        recipe=RECIPE, run_name=run_name, started_at=started_at, settings=common.settings_record(args),
        configuration=configuration_record(args), timing=common.timing_record(history, total_s), metrics=metrics,
        environment=common.capture_environment(backend.device, args.device),
    )
    path = common.write_results(args.results_dir, results)
    timing = results["timing"]
    print(
        f"{RECIPE} {results['run_name']}: {metrics['epochs_completed']} epochs, {history.steps} steps, "
        f"test accuracy {metrics['test_accuracy']:.4f}, total {timing['total_s']:.1f} s, "
        f"{timing['iter_s']['mean']:.4f} s/iter, first epoch {timing['first_epoch_s']:.1f} s -> {path}"
    )


def _xmp_worker(index: int, args: argparse.Namespace) -> None:
    """Entry point of each torch_xla.launch process (index is the process's ordinal)."""
    common.run_recipe(PROG, lambda: run(xmp_backend(), args))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.device != "tpu":
        run(eager_backend(args.device), args)
    elif args.strategy == "single":
        run(single_core_backend(), args)
    elif args.strategy == "spmd":
        run(spmd_backend(), args)
    else:
        import torch_xla  # noqa: PLC0415

        # Fail on missing data here, once, before any replica starts (and download only once).
        load_data(args)
        torch_xla.launch(_xmp_worker, args=(args,))


if __name__ == "__main__":
    common.run_recipe(PROG, main)

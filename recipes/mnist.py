"""MNIST on a CPU, a GPU, one TPU core or every TPU core, timed the same way (experiment E1).

    python recipes/mnist.py --device cpu --dataset fake --epochs 2
    python recipes/mnist.py --device cuda
    python recipes/mnist.py --device tpu --cores 1
    python recipes/mnist.py --device tpu --cores all                  # one process per core
    python recipes/mnist.py --device tpu --cores all --strategy spmd  # one process, SPMD
    PJRT_DEVICE=CPU CPU_NUM_DEVICES=2 python recipes/mnist.py --device tpu --strategy spmd

The last line is a dry run of SPMD on the CPU. Network, optimiser and schedule are the PyTorch
MNIST example's (Adadelta 1.0, StepLR 0.7, batch 128, 10 epochs; ``--optimizer sgd`` for E3).
Read it top down: the network, the loop (``Trainer``, shaped like pytorch/examples' DDP series),
``main``, then where training runs (E1's strategies, side by side), the data and the command line.
recipes/harness/ gives the loop timers, a progress bar, checkpoints (``--resume``) and the results.
"""

from __future__ import annotations

import tpu_backend  # before torch, which loads TorchTPU where it is installed (see there)

# isort: split
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import harness
from harness import RecipeError, Replicas

RECIPE, PROG = "mnist", "mnist.py"
REFERENCE_BATCH = 128  # the batch E1's learning rate was tuned for (--lr-scaling linear scales it)


class Net(nn.Module):
    """The PyTorch MNIST example network of E1."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = F.relu(self.fc1(torch.flatten(self.dropout1(x), 1)))
        return F.log_softmax(self.fc2(self.dropout2(x)), dim=1)


class Trainer:
    """E1's training loop: the same on every device; ``strategy`` spreads the work."""

    def __init__(
        self, model: nn.Module, strategy: Strategy, loaders: tuple, run: harness.Run, args
    ):
        self.model = model
        self.strategy = strategy
        self.replicas = strategy.replicas
        self.run = run
        self.args = args
        self.train_loader, self.test_loader = loaders
        self.optimizer = build_optimizer(model, args)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, harness.WarmupThenDecay(args.warmup_epochs, args.gamma)
        )
        # What a checkpoint holds; --resume restores their states, the RNGs and the history so far.
        self.parts = {"model": model, "optimizer": self.optimizer, "scheduler": self.scheduler}
        self.first_epoch = run.restore(self.parts)

    def _run_batch(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = F.nll_loss(self.model(images), labels)
        loss.backward()
        self.strategy.step(self.optimizer)
        return loss.detach()

    def _run_epoch(self, epoch: int) -> float:
        """One pass over this process's shard; returns the mean training loss over every process."""
        self.model.train()
        harness.set_loader_epoch(self.train_loader, epoch)  # a new order every epoch
        batches = self.strategy.batches(self.train_loader)
        bar = self.run.progress_bar(batches, len(self.train_loader), epoch)
        # Losses stay on the device and are read once per epoch (an .item() per step syncs);
        # a list, as a sum started from zeros would be a new XLA graph.
        losses = []
        timer = harness.StepTimer(self.replicas.device)
        for images, labels in bar:
            losses.append(self._run_batch(images, labels))
            timer.lap()
            bar.show_loss(losses[-1], len(losses))
            self.run.history.steps += 1
            if self.run.out_of_steps():  # --max-steps
                break
        self.run.history.add_training(timer.stop())  # the epoch's one device sync
        sums = [torch.stack(losses).sum().item(), len(losses)]
        loss_total, step_total = self.replicas.sum_over_processes(sums)
        return loss_total / step_total

    def train(self) -> None:
        for epoch in range(self.first_epoch, self.args.epochs):
            if self.run.out_of_steps():
                break
            self.run.start_epoch()
            loss = self._run_epoch(epoch)
            self.run.start_test()
            test_batches = self.strategy.batches(self.test_loader)
            accuracy = harness.global_accuracy(self.model, test_batches, self.replicas)
            lr = self.optimizer.param_groups[0]["lr"]
            self.run.end_epoch(epoch, lr=lr, loss=loss, accuracy=accuracy)
            self.scheduler.step()
            self.run.save_checkpoint(self.parts, epoch + 1)


def build_optimizer(model: nn.Module, args) -> torch.optim.Optimizer:
    # Linear lr scaling (E3) is SGD's rule (Goyal et al. 2017); Adadelta at 8x the batch and lr
    # does worse (docs/experiments.md, E3).
    if args.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=args.effective_lr, momentum=args.momentum)
    return torch.optim.Adadelta(model.parameters(), lr=args.effective_lr)


def train(strategy: Strategy, args) -> None:
    replicas = strategy.replicas
    harness.resolve_batches(
        args, replicas.replicas, reference_batch=REFERENCE_BATCH, default="per-device"
    )
    args.run_name = args.run_name or harness.default_run_name(
        args.device, world_size=args.world_size, strategy=args.strategy
    )
    # Seeds, before the model exists.
    run = harness.Run(args, replicas, recipe=RECIPE, prog=PROG, resume_keys=RESUME_KEYS)
    train_set, test_set = load_data(args)
    if strategy.feed is None:  # all data lives on the device (MNIST fits)
        train_set = train_set.to(replicas.device)
        test_set = test_set.to(replicas.device)
    loaders = harness.shard_loaders(  # SPMD: one process loads whole global batches
        train_set,
        test_set,
        replicas,
        batch=args.global_batch // replicas.world_size,
        test_batch=args.test_batch,
        seed=args.seed,
    )
    model = strategy.wrap(Net().to(replicas.device))
    trainer = Trainer(model, strategy, loaders, run, args)
    if strategy.share_weights and replicas.world_size > 1:
        strategy.share_weights(model)
    trainer.train()
    run.write_results(configuration(args, replicas), {})


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.device != "tpu":  # cpu or cuda, as pytorch/examples
        train(Strategy(Replicas(harness.select_device(args.device))), args)
    elif args.backend == "torch_tpu" and args.strategy == "ddp":
        tpu_backend.data_parallel(
            __file__,
            argv,
            lambda fields: train(torch_tpu(fields), args),
            lambda: load_data(args),  # as for xmp, below
        )
    elif args.backend == "torch_tpu":
        train(torch_tpu(), args)
    elif args.strategy == "xmp":
        # A missing dataset is one line here, not one per process (and it downloads once).
        load_data(args)
        harness.import_torch_xla().launch(_one_process_per_core, args=(args,))
    else:
        train(one_core() if args.strategy == "single" else spmd(), args)


def _one_process_per_core(index: int, args) -> None:
    harness.run_recipe(PROG, lambda: train(one_process_per_core(), args))


# ------------------------------------------------------------------ E1: where training runs
# E1's lesson. Going from one TPU core to all of them changes how the work is spread, never the
# network or the training step, and the three torch_xla strategies below differ only in that:
# - one core: the step is lazy, and optimizer_step(barrier=True) runs the graph it built;
# - one process per core: torch_xla.launch starts a replica per core, each reads its own shard,
#   optimizer_step all-reduces the gradients, and the device loader ends each step (no barrier);
# - SPMD: one process; the loader shards each global batch over every core.
# The published 8-core run was slower than one core (158.9 s vs 127.2 s) for reasons outside these
# lines: a .item() every step stalls the device, the 8x global batch needs a scaled learning rate
# (E3), and an accuracy must count every replica's shard. This recipe avoids all three.
# On XLA a step is a graph, compiled once while its shapes and constants stay: torch_xla bakes 0
# and ±1 in as constants, so an lr of 1.0 in epoch 1, then 0.7, compiles the step twice;
# XLA_NO_SPECIAL_SCALARS=1 (parse_args) feeds all of them in.
# TorchTPU (torch_tpu, torch >= 2.11) runs the same network eagerly on its "tpu" device: one
# device, or DDP over its "tpu_dist" process group with one process per device (torchrun).


@dataclass
class Strategy:
    """How this process trains: its replicas, how batches reach the device, how a step ends."""

    replicas: Replicas
    # loader -> device batches; None: all data lives on the device
    feed: Callable | None = None
    step: Callable = lambda optimizer: optimizer.step()
    # makes every replica start from rank 0's weights
    share_weights: Callable[[nn.Module], None] | None = None
    # DDP: all-reduce gradients in backward()
    wrap: Callable[[nn.Module], nn.Module] = lambda model: model

    def batches(self, loader):
        return loader if self.feed is None else self.feed(loader)


def one_core() -> Strategy:
    import torch_xla.core.xla_model as xm  # only the tpu image has torch_xla

    device = harness.select_device("tpu")
    return Strategy(Replicas(device), step=lambda opt: xm.optimizer_step(opt, barrier=True))


def one_process_per_core() -> Strategy:  # runs in every process torch_xla.launch starts
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    import torch_xla.runtime as xr

    device = harness.select_device("tpu")
    replicas = Replicas(
        device,
        rank=xr.global_ordinal(),
        world_size=xr.world_size(),
        nodes=max(1, xr.world_size() // xr.local_process_count()),
    )
    return Strategy(
        replicas,
        feed=lambda loader: pl.MpDeviceLoader(loader, device),
        step=xm.optimizer_step,
        share_weights=xm.broadcast_master_param,
    )


def spmd() -> Strategy:
    import numpy as np  # a torch_xla dependency
    import torch_xla.distributed.parallel_loader as pl
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    xr.use_spmd()
    devices = xr.global_runtime_device_count()
    # A 1-D mesh of every device; images are split along the batch, labels (1-D) replicated.
    mesh = xs.Mesh(np.arange(devices), (devices,), ("data",))
    sharding = xs.ShardingSpec(mesh, ("data", None, None, None))
    device = harness.select_device("tpu")
    return Strategy(
        Replicas(device, replicas=devices),
        feed=lambda loader: pl.MpDeviceLoader(loader, device, input_sharding=sharding),
    )


def torch_tpu(ddp_fields: dict | None = None) -> Strategy:
    """One device, or DDP in every process torchrun starts."""
    if ddp_fields is None:  # eager: each .item() and the epoch-end sync wait for the device
        return Strategy(Replicas(tpu_backend.torch_tpu_device()))
    # No device_ids on TPU.
    return Strategy(Replicas(**ddp_fields), wrap=DistributedDataParallel)


# ------------------------------------------------------------------ data and results
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
FAKE_NOISE = 4.0  # per pixel (templates have std 1): fake data then takes a few epochs to learn


def load_data(args) -> tuple[harness.IndexBatchDataset, harness.IndexBatchDataset]:
    """Train and test sets as normalised in-memory tensors [N, 1, 28, 28] (a batch is one
    gather): MNIST or the fake set."""
    if args.dataset == "fake":  # same class templates for both splits, different samples
        sizes = ((args.fake_train_size, 1), (args.fake_test_size, 2))
        return tuple(fake_split(args, size, args.seed + offset) for size, offset in sizes)
    datasets = harness.import_optional(
        "torchvision.datasets", "--dataset real", "torchvision", instead="--dataset fake"
    )
    splits = [
        harness.open_dataset(
            datasets.MNIST,
            args.data_dir,
            "MNIST",
            train=train,
            download=args.download and train,
            missing=f"MNIST is not under {args.data_dir}/MNIST/raw",
            fix="put the four idx files there",
        )
        for train in (True, False)
    ]
    return tuple(
        harness.IndexBatchDataset(
            (split.data.unsqueeze(1).float() / 255 - MNIST_MEAN) / MNIST_STD, split.targets
        )
        for split in splits
    )


def fake_split(args, size: int, sample_seed: int) -> harness.IndexBatchDataset:
    images, labels = harness.fake_split(
        size, (1, 28, 28), 10, template_seed=args.seed, sample_seed=sample_seed, noise=FAKE_NOISE
    )
    return harness.IndexBatchDataset(images, labels)


def configuration(args, replicas: Replicas) -> dict:
    """The results' configuration: E1's settings and how the work was spread."""
    cores = None
    if args.device == "tpu":
        cores = 1 if args.cores == "1" else args.world_size
    # DDP is DDP on every device.
    spread = {"parallel": "ddp"} if args.strategy == "ddp" else {"strategy": args.strategy}
    return harness.configuration_record(
        args, replicas, model="mnist-net", image_size=28, cores=cores, **spread
    )


# ------------------------------------------------------------------ command line
# Settings a checkpoint must share with the run that resumes it (epochs may grow).
RESUME_KEYS = (
    *("device", "strategy", "world_size", "dataset", "seed"),
    *("per_device_batch", "global_batch", "lr", "lr_scaling", "effective_lr", "gamma"),
    *("warmup_epochs", "fake_train_size", "fake_test_size", "optimizer", "momentum"),
)


def parse_args(argv: list[str] | None):
    parser = harness.RecipeArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    harness.add_common_arguments(parser, default_epochs=10)
    add = parser.add_argument
    add(
        "--cores",
        choices=("1", "all"),
        help="tpu only: one core, or all (default: 1, or all for xmp/spmd/ddp)",
    )
    add(
        "--strategy",
        choices=("single", "xmp", "spmd", "ddp"),
        help="tpu only: single core; torch_xla: xmp = one process per core, spmd = one process "
        "sharding each batch; torch_tpu: ddp = one process per device",
    )
    add(
        "--tpu-backend",
        choices=("auto", *tpu_backend.BACKENDS),
        default="auto",
        help="tpu only (default: auto, the installed one; torch_xla when both are)",
    )
    harness.add_batch_arguments(
        parser,
        reference_batch=REFERENCE_BATCH,
        default="per-device",
        optimizer="Adadelta (or SGD)",
        lr=1.0,
        lr_scaling="linear",
    )
    add(
        "--optimizer",
        choices=("adadelta", "sgd"),
        default="adadelta",
        help="adadelta: E1's (default); sgd: with --momentum (E3)",
    )
    add("--momentum", type=float, default=0.9, help="--optimizer sgd: momentum (default: 0.9)")
    add(
        "--gamma",
        type=harness.positive_float,
        default=0.7,
        help="learning-rate decay per epoch (default: 0.7)",
    )
    add(
        "--test-batch",
        type=harness.positive_int,
        default=1000,
        help="evaluation batch per process (default: 1000)",
    )
    harness.add_fake_data_arguments(parser, train=3840, test=1000)
    args = harness.parse_arguments(parser, argv)
    for option, value in (("--cores", args.cores), ("--strategy", args.strategy)):
        if value is not None and args.device != "tpu":
            raise RecipeError(
                f"{option} applies to --device tpu only; --device {args.device} trains on one "
                "device"
            )
    if args.device == "tpu":
        # Read when torch_xla loads (in resolve), and inherited by its processes: see E1's lesson.
        os.environ.setdefault("XLA_NO_SPECIAL_SCALARS", "1")
    # tpu_backend.resolve fills in strategy and cores too.
    args.backend = tpu_backend.resolve(args) if args.device == "tpu" else None
    return args


if __name__ == "__main__":
    harness.run_recipe(PROG, main)

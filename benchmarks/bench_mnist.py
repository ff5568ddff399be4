"""Training steps/s of the MNIST recipe's loop against a bare loop and the published-style loop.

    .venv/bin/python benchmarks/bench_mnist.py                        # eager CPU
    .venv/bin/python benchmarks/bench_mnist.py --device cuda
    PJRT_DEVICE=CPU .venv-xla/bin/python benchmarks/bench_mnist.py --device tpu   # XLA (CPU or TPU)

All three loops train the same network from the same initial weights with the
same optimiser on the same images, in this one process, taking turns epoch by
epoch so that load from elsewhere on the machine hits them alike:

- recipe:    recipes/mnist.py's own train_epoch (pre-collated batches, no per-step sync);
- bare:      the least a loop can do: batches already on the device, no loader, no timing;
- published: a per-sample transform DataLoader (PIL -> ToTensor -> Normalize) and
             ``loss.cpu().item()`` every step, as the published comparison did.

Goals (issue 3): recipe within 3% of bare; faster than published; on XLA no
compilation after the warm-up epoch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "recipes"))
import common  # noqa: E402
import mnist  # noqa: E402


def uint8_digits(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The recipe's fake images as MNIST's raw uint8 [N,28,28], so every loop can start from raw pixels."""
    images, labels = common.fake_split(count, (28, 28), mnist.NUM_CLASSES, template_seed=seed, sample_seed=seed + 1,
                                       noise=mnist.FAKE_NOISE)
    scaled = (images - images.min()) / (images.max() - images.min()) * 255
    return scaled.round().to(torch.uint8), labels


class PublishedStyleDataset(torch.utils.data.Dataset):
    """One image at a time through PIL and torchvision transforms, like torchvision's MNIST with a transform."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        from torchvision import transforms  # noqa: PLC0415

        self.images, self.labels = images, labels
        self.transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((mnist.MNIST_MEAN,), (mnist.MNIST_STD,))])

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        from PIL import Image  # noqa: PLC0415

        return self.transform(Image.fromarray(self.images[index].numpy(), mode="L")), int(self.labels[index])


def fresh_model(device: torch.device, lr: float, seed: int):
    torch.manual_seed(seed)
    model = mnist.Net().to(device)
    return model, torch.optim.Adadelta(model.parameters(), lr=lr)


class RecipeLoop:
    name = "recipe"

    def __init__(self, backend, args, dataset, seed):
        self.backend, self.args = backend, args
        self.loader = common.batch_loader(dataset, args.per_device_batch, train=True, seed=seed, drop_last=True)
        self.model, self.optimizer = fresh_model(backend.device, args.effective_lr, seed)
        self.history = mnist.History()

    def epoch(self, epoch: int) -> int:
        before = self.history.steps
        mnist.train_epoch(self.model, self.optimizer, self.loader, self.backend, self.args, self.history, epoch)
        return self.history.steps - before


class BareLoop:
    name = "bare"

    def __init__(self, backend, args, dataset, seed):
        self.backend = backend
        loader = common.batch_loader(dataset, args.per_device_batch, train=True, seed=seed, drop_last=True)
        self.batches = [(x.to(backend.device), y.to(backend.device)) for x, y in loader]
        self.model, self.optimizer = fresh_model(backend.device, args.effective_lr, seed)

    def epoch(self, epoch: int) -> int:
        self.model.train()
        for images, labels in self.batches:
            self.optimizer.zero_grad(set_to_none=True)
            F.nll_loss(self.model(images), labels).backward()
            self.backend.step_optimizer(self.optimizer)
        common.synchronize(self.backend.device)
        return len(self.batches)


class PublishedLoop:
    name = "published"

    def __init__(self, backend, args, raw, seed):
        self.backend = backend
        generator = torch.Generator().manual_seed(seed)
        self.loader = torch.utils.data.DataLoader(PublishedStyleDataset(*raw), batch_size=args.per_device_batch,
                                                  shuffle=True, drop_last=True, generator=generator)
        self.model, self.optimizer = fresh_model(backend.device, args.effective_lr, seed)

    def epoch(self, epoch: int) -> int:
        self.model.train()
        steps = 0
        for images, labels in self.loader:
            images, labels = images.to(self.backend.device), labels.to(self.backend.device)
            self.optimizer.zero_grad()
            loss = F.nll_loss(self.model(images), labels)
            loss.backward()
            self.backend.step_optimizer(self.optimizer)
            loss.cpu().item()  # the published loop logged every step, forcing a device sync
            steps += 1
        return steps


def compilations(backend) -> int | None:
    return mnist.xla_compilations() if backend.xla else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda", "tpu"), default="cpu")
    parser.add_argument("--batch", type=common.positive_int, default=128)
    parser.add_argument("--steps", type=common.positive_int, default=30, help="steps per epoch (default: 30)")
    parser.add_argument("--repeats", type=common.positive_int, default=3, help="timed epochs per loop (default: 3)")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()

    args = mnist.parse_args(["--device", options.device, "--dataset", "fake", "--quiet",
                             "--per-device-batch", str(options.batch)])
    backend = mnist.eager_backend(options.device) if options.device != "tpu" else mnist.single_core_backend()
    mnist.resolve_batches(args, backend.world_size)
    raw = uint8_digits(options.batch * options.steps, options.seed)
    dataset = common.IndexBatchDataset(mnist.normalize(raw[0]), raw[1])
    loops = [RecipeLoop(backend, args, dataset, options.seed), BareLoop(backend, args, dataset, options.seed),
             PublishedLoop(backend, args, raw, options.seed)]

    print(f"device {backend.device} | torch {torch.__version__} | threads {torch.get_num_threads()} | "
          f"batch {options.batch} | {options.steps} steps/epoch | 1 warm-up + {options.repeats} timed epochs per loop")
    for loop in loops:  # warm-up: allocator, caches, and XLA's compilations
        loop.epoch(0)
    compiled_before = {loop.name: 0 for loop in loops}
    rates = {loop.name: [] for loop in loops}
    for repeat in range(1, options.repeats + 1):
        for loop in loops:
            before = compilations(backend)
            common.synchronize(backend.device)
            start = time.perf_counter()
            steps = loop.epoch(repeat)
            common.synchronize(backend.device)
            rates[loop.name].append(steps / (time.perf_counter() - start))
            if before is not None:
                compiled_before[loop.name] += compilations(backend) - before

    median = {name: statistics.median(values) for name, values in rates.items()}
    for name, values in rates.items():
        line = f"{name:>10}: {median[name]:8.2f} steps/s (median; min {min(values):.2f}, max {max(values):.2f})"
        if backend.xla:
            line += f", compilations in timed epochs: {compiled_before[name]}"
        print(line)
    print(f"recipe / bare      = {median['recipe'] / median['bare']:.3f}  (goal >= 0.97)")
    print(f"recipe / published = {median['recipe'] / median['published']:.3f}  (goal > 1)")
    if backend.xla:
        print(f"XLA compilations in total: {mnist.xla_compilations()}; after warm-up in the recipe loop: {compiled_before['recipe']} (goal 0)")


if __name__ == "__main__":
    main()

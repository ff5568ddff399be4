"""Test helpers for the MNIST recipe: a small MNIST in MNIST's own on-disk format (so
tests run torchvision's real loader), and running the recipe as a subprocess.

torchvision.datasets.MNIST(root) reads four uncompressed IDX files from
``<root>/MNIST/raw/`` (and skips the download when they are there). IDX: a
big-endian header (magic 0x00000803 for 3-D uint8 images, 0x00000801 for 1-D
uint8 labels, then each dimension as uint32) followed by the raw bytes.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import torch
from paths import REPO_ROOT
from results_contract import assert_valid_results

RECIPE = REPO_ROOT / "recipes" / "mnist.py"

IMAGE_MAGIC = 0x00000803
LABEL_MAGIC = 0x00000801
SPLITS = {"train": "train", "test": "t10k"}


def idx_images(images: torch.Tensor) -> bytes:
    """IDX bytes of uint8 images [N, 28, 28]."""
    count, rows, cols = images.shape
    return struct.pack(">IIII", IMAGE_MAGIC, count, rows, cols) + images.to(torch.uint8).numpy().tobytes()


def idx_labels(labels: torch.Tensor) -> bytes:
    """IDX bytes of uint8 labels [N]."""
    return struct.pack(">II", LABEL_MAGIC, len(labels)) + labels.to(torch.uint8).numpy().tobytes()


def learnable_digits(count: int, seed: int, template_seed: int = 1234) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` uint8 28x28 images: a bright class-specific patch pattern plus noise, so a few
    steps of training measurably lower the loss. Same arguments -> same bytes."""
    templates = (torch.rand((10, 28, 28), generator=torch.Generator().manual_seed(template_seed)) > 0.8).float() * 200
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (count,), generator=generator)
    noise = torch.rand((count, 28, 28), generator=generator) * 120
    images = (templates[labels] + noise).clamp(0, 255).to(torch.uint8)
    return images, labels


def write_mnist(root: Path, train_count: int = 256, test_count: int = 128, seed: int = 0) -> Path:
    """Write the four IDX files under ``root/MNIST/raw`` and return ``root`` (the recipe's --data-dir)."""
    raw = Path(root) / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for split, count, split_seed in (("train", train_count, seed), ("test", test_count, seed + 1)):
        images, labels = learnable_digits(count, split_seed)
        prefix = SPLITS[split]
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(idx_images(images))
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(idx_labels(labels))
    return Path(root)


def run_mnist(
    *args, python: str = sys.executable, env: dict | None = None, timeout: float = 300, wrapped: bool = False, **popen
) -> subprocess.CompletedProcess:
    """Run ``python recipes/mnist.py ARGS`` the way an image does (a plain script, envkit not
    imported), ``wrapped``: through the run wrapper as run.sh starts it; ``env`` entries are added to
    this process's environment."""
    wrapper = [python, str(REPO_ROOT / "envkit" / "support" / "provenance.py")] if wrapped else []
    return subprocess.run(
        [*wrapper, python, str(RECIPE), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        **popen,
    )


def read_results(results_dir: Path, run_name: str) -> dict:
    """A run's results, checked against the results contract as written."""
    return assert_valid_results(Path(results_dir) / f"mnist-{run_name}.json")


def checkpoint_weights(results_dir: Path, run_name: str) -> dict:
    """The model weights in a run's checkpoint (default checkpoint directory)."""
    path = Path(results_dir) / "checkpoints" / f"mnist-{run_name}.pt"
    return torch.load(path, map_location="cpu", weights_only=True)["model"]

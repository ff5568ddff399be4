"""``--preset fast`` and its parts: mixed precision, channels_last, pinned memory, loader workers,
compile.

``--preset faithful`` (the default) leaves them all off, as E2 was published; ``fast`` turns on what
helps on the device, and any option set on the command line wins.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn

from harness import RecipeError, non_negative_int

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def add_speed_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--preset",
        choices=("faithful", "fast"),
        default="faithful",
        help="faithful: E2's plain settings; fast: channels_last, AMP, pinned memory, loader "
        "workers and (cuda, not dp) torch.compile, unless set one by one (default: faithful)",
    )
    add(
        "--amp",
        choices=("none", "bf16", "fp16"),
        help="autocast dtype (default: none; fast: bf16, fp16 on GPUs without bf16)",
    )
    add(
        "--channels-last",
        action=argparse.BooleanOptionalAction,
        help="NHWC memory format (default: off; fast: on)",
    )
    add(
        "--pin-memory",
        action=argparse.BooleanOptionalAction,
        help="page-locked host batches, cuda only (default: off; fast: on)",
    )
    add(
        "--workers", type=non_negative_int, help="DataLoader worker processes (default: 0; fast: 2)"
    )
    add(
        "--compile",
        action=argparse.BooleanOptionalAction,
        help="torch.compile the model (default: off; fast: on for cuda without dp)",
    )


def apply_preset(args: argparse.Namespace) -> None:
    """Fill the speed options the user left unset: all off (faithful to E2), or the ``fast``
    choices."""
    fast, cuda = args.preset == "fast", args.device == "cuda"
    if args.amp is None:
        # bf16 needs Ampere or later; "auto" is settled in the training process (resolve_auto_amp),
        # so a torchrun launcher never opens a CUDA context of its own.
        args.amp = ("auto" if cuda else "bf16") if fast else "none"
    args.channels_last = fast if args.channels_last is None else args.channels_last
    args.pin_memory = fast and cuda if args.pin_memory is None else args.pin_memory
    args.workers = (2 if fast else 0) if args.workers is None else args.workers
    if args.compile is None:
        # Compiling on CPU needs a C++ toolchain and minutes; DataParallel re-replicates the module
        # every step.
        args.compile = fast and cuda and args.parallel != "dp"
    if args.compile and args.parallel == "dp":
        raise RecipeError(
            "--compile does not work with --parallel dp (DataParallel replicates the module every "
            "step); use none or ddp"
        )
    if args.pin_memory and not cuda:
        raise RecipeError("--pin-memory speeds up copies to a GPU only; use it with --device cuda")


def resolve_auto_amp(args: argparse.Namespace) -> None:
    """``--preset fast`` on cuda: bf16 where the GPU supports it, else fp16 (with a gradient
    scaler)."""
    if args.amp == "auto":
        args.amp = "bf16" if torch.cuda.is_bf16_supported() else "fp16"


class Autocast(nn.Module):
    """Run the wrapped model under autocast and return float32 logits. DataParallel runs each
    replica in its own thread, where autocast state starts afresh, so the dtype is set inside
    forward."""

    def __init__(self, model: nn.Module, device_type: str, dtype: torch.dtype):
        super().__init__()
        self.model = model
        self.device_type = device_type
        self.dtype = dtype

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        with torch.autocast(self.device_type, dtype=self.dtype):
            return self.model(images).float()


def with_amp(model: nn.Module, args: argparse.Namespace, device: torch.device) -> nn.Module:
    """``model`` under ``--amp`` autocast, or ``model`` itself with --amp none."""
    return model if args.amp == "none" else Autocast(model, device.type, AMP_DTYPES[args.amp])


def with_loader_options(
    loader: torch.utils.data.DataLoader, args: argparse.Namespace
) -> torch.utils.data.DataLoader:
    """``loader`` (from harness.batch_loader) with --workers and --pin-memory: the same batches in
    the same order."""
    if args.workers == 0 and not args.pin_memory:
        return loader
    return torch.utils.data.DataLoader(
        loader.dataset,
        sampler=loader.sampler,
        batch_size=None,
        num_workers=args.workers,
        pin_memory=args.pin_memory,
        persistent_workers=args.workers > 0,
    )

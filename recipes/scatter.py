"""``cifar.py --show-scatter``: how the first training batch is split over the replicas (the lesson
of E2).

DataParallel scatters each batch over the GPUs, runs a replica of the model on each share and
gathers the outputs on the first GPU; DDP gives each process its own share and gathers nothing. A
forward hook on the model records every call, so the printout shows what really happened rather than
what should have.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

import harness


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


def report(
    parallel: str,
    replicas,
    images: torch.Tensor,
    calls: list,
    output: torch.Tensor,
    assumed_devices: int | None,
) -> list[str]:
    """The lines ``--show-scatter`` prints for one batch; ``assumed_devices``: the GPUs a CPU run
    describes."""
    if parallel == "ddp":
        device, given, produced = calls[0]
        return [
            f"scatter (ddp rank {replicas.rank}/{replicas.world_size}, {device}): input {given} -> "
            f"output {produced}; no gather: each process keeps its outputs and DDP all-reduces "
            "gradients"
        ]
    if parallel == "none":
        device, given, produced = calls[0]
        return [
            f"scatter (none, {device}): input {given} -> output {produced}; one device, nothing to "
            "scatter or gather"
        ]
    lines = [f"scatter (dp, {len(calls)} replica(s)): batch {shape_text(images)}"]
    lines += [
        f"  replica {index} on {device}: input {given} -> output {produced}"
        for index, (device, given, produced) in enumerate(calls)
    ]
    lines.append(f"  gathered on {output.device}: output {shape_text(output)}")
    if replicas.device.type == "cpu":
        # torch.nn.parallel.scatter splits like Tensor.chunk; without GPUs nothing is scattered, so
        # show the split it would make.
        shares = ", ".join(shape_text(chunk) for chunk in images.chunk(assumed_devices))
        lines.append(
            f"  (cpu: DataParallel has no GPUs and runs the module once; over {assumed_devices} "
            f"GPUs the scatter would give inputs {shares} and gather output [{len(images)}, "
            f"{output.shape[-1]}])"
        )
    return lines


def forward(
    model: nn.Module,
    net: nn.Module,
    images: torch.Tensor,
    *,
    show: bool,
    parallel: str,
    replicas,
    assumed_devices: int | None,
) -> torch.Tensor:
    """``model(images)``; with ``show``, print how ``net`` (the bare model inside ``model``'s
    wrappers) was called."""
    if not show:
        return model(images)
    with replica_calls(net) as calls:
        output = model(images)
    harness.print_lines(report(parallel, replicas, images, calls, output, assumed_devices))
    return output

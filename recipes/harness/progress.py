"""Watching a run: wall-clock timers that sync the device when it matters, and a progress bar."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable

import torch

from .devices import after_step, synchronize


class DeviceTimer:
    """Wall-clock laps; ``lap(sync=True)`` first waits for the device's queued work."""

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


class StepTimer:
    """The laps of one epoch's steps.

    The device is synced once, in :meth:`stop`, not every step: a per-step sync stalls
    the pipeline (the mistake E1 warns about). Per-step laps then measure the host's
    step rate, which equals the device's in steady state, and the epoch-end sync
    lands in the epoch's last lap, so the laps of an epoch add up to its time.
    """

    def __init__(self, device: torch.device):
        self._clock = DeviceTimer(device)
        self.laps = []

    def lap(self) -> None:
        self.laps.append(self._clock.lap())

    def stop(self) -> list[float]:
        """The epoch's laps, once the device has finished the work they queued."""
        self.laps[-1] += self._clock.lap(sync=True)
        return self.laps


def progress(iterable: Iterable, *, total: int | None, desc: str, enabled: bool):
    """A tqdm bar over ``iterable`` when ``enabled`` (main process, not --quiet), else the
    iterable."""
    if not enabled:
        return iterable
    from tqdm import tqdm  # only needed when a bar is shown

    return tqdm(iterable, total=total, desc=desc, leave=False, dynamic_ncols=True, file=sys.stderr)


class ProgressBar:
    """One epoch's batches, behind a bar when ``enabled``, which shows the loss every ``log_every``
    steps."""

    def __init__(
        self,
        batches: Iterable,
        *,
        total: int,
        desc: str,
        enabled: bool,
        log_every: int,
        device: torch.device,
        show_loss: bool = True,
    ):
        self._bar = progress(batches, total=total, desc=desc, enabled=enabled)
        self._shows_loss = enabled and show_loss
        self.log_every = log_every
        self.device = device

    def __iter__(self):
        return iter(self._bar)

    def show_loss(self, loss: torch.Tensor, step_in_epoch: int) -> None:
        """Every ``log_every`` steps, put ``loss`` on the bar once its step has run (no extra
        sync)."""
        if self._shows_loss and step_in_epoch % self.log_every == 0:
            after_step(
                self.device, lambda value: self._bar.set_postfix(loss=f"{value.item():.4f}"), loss
            )

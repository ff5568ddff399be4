"""Checkpoints: every part's state and the RNGs, saved atomically, and read back only by a run that
fits them."""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .devices import is_xla
from .errors import RecipeError
from .files import write_atomic


def checkpoint_path(checkpoint_dir: Path, recipe: str, run_name: str) -> Path:
    """Where a run's checkpoint lives: ``<checkpoint_dir>/<recipe>-<run_name>.pt``."""
    return checkpoint_dir / f"{recipe}-{run_name}.pt"


def rng_states(device: torch.device | None = None) -> dict:
    """Every RNG state a resumed run needs to continue bit-identically."""
    states = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    if device is not None and is_xla(device):
        import torch_xla.core.xla_model as xm

        states["xla"] = int(xm.get_rng_state(device=device))
    return states


def restore_rng_states(states: dict, device: torch.device | None = None) -> None:
    """Undo :func:`rng_states`."""
    random.setstate(states["python"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    if "xla" in states and device is not None and is_xla(device):
        import torch_xla.core.xla_model as xm

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
    """Save ``state`` (tensors moved to CPU) atomically: a kill mid-write leaves the previous
    checkpoint."""
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
    except Exception as exc:  # noqa: BLE001 - torch raises many types for a damaged file
        # Only the exception type: torch's messages span lines and suggest weights_only=False.
        raise RecipeError(
            f"checkpoint {path} is corrupt or unreadable ({type(exc).__name__}); delete it to "
            "start over, or pass another --checkpoint-dir"
        ) from None
    if not isinstance(state, dict) or "epoch" not in state:
        raise RecipeError(
            f"checkpoint {path} is not an envkit recipe checkpoint; delete it or pass another "
            "--checkpoint-dir"
        )
    return state


def check_resumable(path: Path, saved: dict, current: dict) -> None:
    """RecipeError when a checkpoint was written with different training settings than this
    run's."""
    differences = [
        f"{key}: {saved.get(key)!r} in the checkpoint, {current.get(key)!r} now"
        for key in sorted(set(saved) | set(current))
        if saved.get(key) != current.get(key)
    ]
    if differences:
        raise RecipeError(
            f"cannot resume from {path}: it was written with other settings "
            f"({'; '.join(differences)}); rerun with the same settings, or without --resume"
        )


def resume_checkpoint(prog: str, path: Path, settings: dict, *, announce: bool) -> dict | None:
    """For ``--resume``: the checkpoint at ``path`` if it was written with ``settings``, None if
    there is none (said on stderr when ``announce``, e.g. on the main process only); RecipeError if
    it does not fit."""
    if not path.exists():
        if announce:
            print(
                f"{prog}: no checkpoint at {path}; starting from the first epoch", file=sys.stderr
            )
        return None
    state = load_checkpoint(path)
    check_resumable(path, state.get("training_settings", {}), settings)
    return state


def resume_settings(args: argparse.Namespace, keys: Sequence[str]) -> dict:
    """The settings a checkpoint must share with the run that resumes it."""
    return {key: getattr(args, key) for key in keys}


class Checkpointer:
    """One run's checkpoint file and the settings (``resume_keys`` of ``args``) a run must share to
    resume from it."""

    def __init__(self, args: argparse.Namespace, *, recipe: str, resume_keys: Sequence[str]):
        self.path = checkpoint_path(args.checkpoint_dir, recipe, args.run_name)
        self.settings = resume_settings(args, resume_keys)

    def resume(self, prog: str, *, announce: bool) -> dict | None:
        """``--resume``: the saved state, None when there is none yet; RecipeError when it does not
        fit this run."""
        return resume_checkpoint(prog, self.path, self.settings, announce=announce)

    def save(self, parts: dict, epochs_done: int, **records: Any) -> None:
        """Every part's ``state_dict()`` after ``epochs_done`` epochs, with ``records`` (RNGs,
        history) beside them."""
        save_checkpoint(
            self.path,
            {
                "epoch": epochs_done,
                # the next epoch's shuffle (DistributedSampler.set_epoch)
                "sampler_epoch": epochs_done,
                **{name: part.state_dict() for name, part in parts.items()},
                **records,
                "training_settings": self.settings,
            },
        )

"""Files a recipe writes: atomically (readers see the old file or the new one, never half), and
owned by the user who started the container (``ENVKIT_RESULTS_OWNER``)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import RecipeError


def chown_to_results_owner(path: Path) -> None:
    """Give ``path`` to ``ENVKIT_RESULTS_OWNER=uid:gid`` when running as root.

    The tpu-vm container runs as root (it needs --privileged); without this the
    user's results directory fills with files they cannot delete.
    """
    owner = os.environ.get("ENVKIT_RESULTS_OWNER", "")
    if not owner or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return
    try:
        uid, gid = (int(part) for part in owner.split(":"))
    except ValueError:
        raise RecipeError(
            f"ENVKIT_RESULTS_OWNER={owner!r} is not 'uid:gid' with numeric ids"
        ) from None
    os.chown(path, uid, gid)


def chown_tree(root: Path) -> None:
    """:func:`chown_to_results_owner` for ``root`` and everything under it (e.g. a dataset
    torchvision just downloaded as root into the user's mounted data directory)."""
    if not os.environ.get("ENVKIT_RESULTS_OWNER") or not Path(root).exists():
        return
    chown_to_results_owner(Path(root))
    for directory, subdirectories, files in os.walk(root):
        for name in subdirectories + files:
            chown_to_results_owner(Path(directory) / name)


def ensure_directory(path: Path) -> Path:
    """Create ``path`` (and parents) and hand new directories to the results owner."""
    missing = []
    current = Path(path)
    while not current.exists():
        missing.append(current)
        current = current.parent
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RecipeError(f"cannot create directory {path}: {exc.strerror}") from None
    for created in reversed(missing):
        chown_to_results_owner(created)
    return path


def write_temp(directory: Path, stem: str, write: Callable[[Any], None]) -> Path:
    """Write through ``write(file)`` into a temp file in ``directory``; return its path."""
    ensure_directory(directory)
    handle, name = tempfile.mkstemp(prefix=f".{stem}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(name, 0o644)
        chown_to_results_owner(Path(name))
    except BaseException:
        os.unlink(name)
        raise
    return Path(name)


def write_atomic(path: Path, write: Callable[[Any], None]) -> None:
    """Replace ``path`` atomically with what ``write(binary_file)`` writes: readers see the old or
    the new file, never half."""
    temp = write_temp(path.parent, path.name, write)
    os.replace(temp, path)


def json_bytes(data: Any) -> bytes:
    """Deterministic JSON: sorted keys, two-space indent, trailing newline."""
    return (json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()

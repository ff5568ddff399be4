"""Atomic file writes: a temp file beside the target, fsync, then os.replace.

A reader sees the old file or the new one, never half of one. (CONTRACTS.md API;
the hygiene stream owns this module and the lead keeps one copy on merge.)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_bytes_atomic(path: str | Path, data: bytes, mode: int | None = None) -> None:
    path = Path(path)
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(partial, mode)
        os.replace(partial, path)
    except BaseException:
        os.unlink(partial)
        raise


def write_text_atomic(path: str | Path, text: str, mode: int | None = None) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), mode)

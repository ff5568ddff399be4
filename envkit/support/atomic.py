"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Every file envkit writes goes through here (rendered files, plots, image tarballs
and manifests, locks, launch files, caches). The bytes go to a temporary file in
the destination's directory (so that the final rename stays on one filesystem),
are fsync'ed (so a crash cannot leave a renamed but empty file; the cache's are not,
``durable``), and then
os.replace() puts the file in place in one step. On any failure the temporary
file is removed and the destination is untouched; the OSError propagates for the
caller to phrase.

``mode``: the permission bits to give the file. None means what a plain open()
would leave: the replaced file's bits, or for a new file 0o666 less the umask
(mkstemp's 0o600 would make shared files such as saved images unreadable to others).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


@contextmanager
def atomic_stream(path: str | os.PathLike, *, mode: int | None = None, durable: bool = True) -> Iterator[BinaryIO]:
    """A binary stream whose bytes replace ``path`` when the block ends without an exception.

    For output too large to hold in memory (image tarballs) or written by a library
    that wants a file object (matplotlib); otherwise use write_bytes_atomic.
    ``durable=False``: not fsync'ed, for what is only kept to save time (envkit's cache), whose reader takes a file
    a crash left empty or short for a missing one: an fsync cost about 0.1 ms of CPU and 0.2 ms of wall time, and a
    cold render keeps four entries (issue 42).
    """
    path = Path(path)
    handle, name = _staged(path)
    try:
        with os.fdopen(handle, "wb") as stream:
            os.fchmod(stream.fileno(), _mode_for(path, mode))
            yield stream
            stream.flush()
            if durable:
                os.fsync(stream.fileno())
        os.replace(name, path)
    except BaseException:
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass
        raise


# A staged file is .<name>.<pid>-<random>.partial: SIGKILL runs no cleanup, and the writer's
# process ID tells a later run (render's leftover check) whether its writer is gone.
PARTIAL_SUFFIX = ".partial"
_PARTIAL = r"^\.(?P<name>.+)\.(?P<pid>\d+)-[^.]+\.partial$"


def partial_prefix(name: str) -> str:
    return f".{name}.{os.getpid()}-"


_STAGED_TRIES = 100


def _staged(path: Path) -> tuple[int, str]:
    """A new file beside ``path`` to stage its bytes in, open: (descriptor, name). What tempfile.mkstemp does, without
    importing tempfile: its imports (shutil, random, weakref) cost every envkit command about 5 ms of CPU, a
    remembered render's among them (benchmarks/bench_render.py)."""
    for _ in range(_STAGED_TRIES):
        name = str(path.parent / f"{partial_prefix(path.name)}{os.urandom(6).hex()}{PARTIAL_SUFFIX}")
        try:
            # mkstemp's flags: the file is new (never one a link or another writer put there) and its user's alone
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), name
        except FileExistsError:
            continue  # 48 random bits taken: as mkstemp, another name
    raise FileExistsError(errno.EEXIST, f"no new name to stage a file in after {_STAGED_TRIES} tries", str(path.parent))


def abandoned(path: Path) -> str | None:
    """The name of the file ``path`` was staged for, when it is a staged file whose writer is gone; else None."""
    match = re.match(_PARTIAL, path.name)
    if match is None:
        return None
    try:
        os.kill(int(match["pid"]), 0)
    except (ProcessLookupError, OverflowError):  # no such process (OverflowError: not a process ID at all)
        return match["name"]
    except PermissionError:  # alive: another user's
        return None
    return None


def write_bytes_atomic(path: str | os.PathLike, data: bytes, *, mode: int | None = None, durable: bool = True) -> None:
    with atomic_stream(path, mode=mode, durable=durable) as stream:
        stream.write(data)


def write_text_atomic(path: str | os.PathLike, text: str, *, mode: int | None = None) -> None:
    """UTF-8, and newlines written as given: the same text gives the same bytes on every platform."""
    write_bytes_atomic(path, text.encode("utf-8"), mode=mode)


def _mode_for(path: Path, mode: int | None) -> int:
    if mode is not None:
        return mode
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask

"""envkit's cache directory: what is kept between runs to save time, never needed for correctness."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from envkit.support.atomic import write_bytes_atomic


def cache_dir() -> Path:
    """Same place scripts/base-image.sh caches the base image."""
    configured = os.environ.get("ENVKIT_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envkit"


def remembered(name: str, key: str, succeeds: Callable[[], bool], at_most: int | None = None) -> bool:
    """Whether ``succeeds()``, asked once for each ``key``: a success is kept (an empty marker named by the key's
    sha256 under the cache's ``name`` folder, which keeps ``at_most`` of them, keep()) and not asked again; a
    failure is asked again every time."""
    marker = cache_dir() / name / hashlib.sha256(key.encode()).hexdigest()
    if marker.exists():
        used(marker)
        return True
    if not succeeds():
        return False
    keep(marker, b"", at_most)
    return True


_keeping = [True]  # False while a dry run runs: it writes nothing anywhere, the cache included


@contextmanager
def nothing_kept(active: bool = True) -> Iterator[None]:
    """While active, keep() keeps nothing."""
    _keeping.append(_keeping[-1] and not active)
    try:
        yield
    finally:
        _keeping.pop()


# The cache holds what renders read and staged build contexts (the project's files, a notebook's text): its
# user's alone, whatever the umask.
PRIVATE_FOLDER = 0o700
PRIVATE_FILE = 0o600


def private_folder(folder: Path) -> None:
    """``folder`` and the parents it lacks made with mode 0700; ``folder`` itself set to 0700 if it was there."""
    try:
        folder.chmod(PRIVATE_FOLDER)  # there already: one call, not one per parent (every entry kept asks)
        return
    except FileNotFoundError:
        pass
    missing = [parent for parent in [folder, *folder.parents] if not parent.exists()]
    for parent in reversed(missing):
        parent.mkdir(mode=PRIVATE_FOLDER, exist_ok=True)
    folder.chmod(PRIVATE_FOLDER)


def keep(path: Path, data: bytes, at_most: int | None = None) -> None:
    """``data`` kept at ``path`` in the cache (mode 0600 in 0700 folders), unless a dry run is running; ``at_most``:
    the entries its folder keeps, the least recently used (used()) going first. Replaced whole, never fsync'ed:
    every reader of the cache takes an entry a crash left empty or short for a missing one."""
    if not _keeping[-1]:
        return
    try:
        private_folder(path.parent)
        write_bytes_atomic(path, data, mode=PRIVATE_FILE, durable=False)
    except OSError:
        return  # a cache that cannot be written only costs time
    if at_most is not None:
        _trim(path.parent, at_most)


def used(path: Path) -> None:
    """An entry just read from the cache: the most recently used now, the last its folder's bound removes."""
    if _keeping[-1]:
        with contextlib.suppress(OSError):
            os.utime(path)


def _trim(folder: Path, at_most: int) -> None:
    """The oldest entries of ``folder`` (by their last use) removed until ``at_most`` are left. Every project, config
    and envkit release adds entries that nothing else removes: unbounded, a day of test runs left 4.4 GB of rendered
    files and 3,700 parsed configs in one user's cache. A file another process is staging (.name.partial) is not an
    entry."""
    try:
        entries = [Path(entry.path) for entry in os.scandir(folder) if entry.name[:1] != "."]
    except OSError:
        return
    if len(entries) <= at_most:
        return  # within its bound: no entry's time read (a full folder's 512 cost a kept entry about 1 ms)
    for path in beyond(entries, at_most):
        with contextlib.suppress(OSError):
            os.unlink(path)


def beyond(entries: list[Path], at_most: int) -> list[Path]:
    """The least recently used of ``entries`` (by modification time, which used() sets) past the ``at_most`` most
    recently used, oldest first; one gone since it was listed counts as the oldest."""

    def last_use(path: Path) -> int:
        try:
            return path.stat().st_mtime_ns
        except OSError:
            return 0

    return sorted(entries, key=last_use)[: max(0, len(entries) - at_most)]

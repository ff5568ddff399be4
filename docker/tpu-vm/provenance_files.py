"""envkit's run wrapper: the files a run leaves in an image's project folder, kept in its run folder (issue 32 §8).

One of the files that ship together as envkit_run.py (provenance.py's SHIPPED): standard library only. In an image
the project's folder is the container's own (templates/Dockerfile.j2 names it in ENVKIT_CONTAINER_PROJECT): what a
program writes there (dvclive's ./dvclive/, torch.save('snapshot.pt')) goes with the container, unlike the mounted
results folder. The wrapper stamps the folder's entries before the command and after it, and copies each regular
file the run created or changed into the run's folder (``<run>/files/<its path in the project>``); the run block's
``project_files`` lists them (path, size, sha256) and names what was left out. On a host the variable is unset and
nothing is done: the files are already where the user is.

Bounded like the wrapper's other reads (issue 33 §8): one walk looks at MAX_ENTRIES entries at most and enters
neither symbolic links, mounts (the results and data folders), .git, venvs nor bytecode caches; only regular files
are copied, opened one folder at a time without following a link (never out of the project, even were a folder
swapped for a link after the walk), at most MAX_FILES of them and MAX_BYTES in all. A file that cannot be copied
is named, never a traceback, and never costs the record or the exit status.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hashlib
import os
import stat
from pathlib import Path

try:  # in envkit: modules of envkit.support
    from . import provenance_records as records
except ImportError:  # shipped: beside envkit_run.py, which put its folder on sys.path
    import provenance_records as records

PROJECT_VARIABLE = "ENVKIT_CONTAINER_PROJECT"
DATA_VARIABLE = "ENVKIT_DATA_DIR"
FOLDER = "files"  # under the run's folder
# What one run keeps: checkpoints of a few hundred MB fit, a dataset the program downloaded beside itself does not.
MAX_FILES = 1_000
MAX_BYTES = 4 * 2**30
MAX_ENTRIES = 100_000  # looked at by one walk: a project's files are at most 100 MB (envkit/project/files.py)
MAX_DEPTH = 32
MAX_NAMED = 100  # of what was left out; the rest are counted
# Not the run's output: git's state, interpreters' caches, and venvs (a folder holding pyvenv.cfg).
SKIPPED = frozenset({".git", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
_CHUNK = 2**20
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Stamp = tuple[int, int, int, int]  # ctime, mtime (ns), size, inode: ctime moves on any write, utime() or not


class Watch:
    """The project folder's entries as they stood before the command (``None`` from watch(): a host run)."""

    def __init__(self, root: Path, skipped: set[tuple[int, int]]) -> None:
        self.root, self.skipped = root, skipped
        self.before, _ = self.walk()

    def changed(self) -> tuple[list[str], list[str]]:
        """What the run created or changed, in path order, and what the walk after it could not compare."""
        after, notes = self.walk()
        return sorted(path for path, stamp in after.items() if self.before.get(path) != stamp), notes

    def walk(self) -> tuple[dict[str, Stamp], list[str]]:
        """Each entry below the root that is not a folder, by its path there, and what was not compared: folders
        entered breadth first, at most MAX_ENTRIES entries looked at, no link or mount entered."""
        try:
            device = os.lstat(self.root).st_dev
        except OSError as exc:
            return {}, [f"{self.root}: {records.reason(exc)}: nothing in it compared"]
        found, notes, pending, seen = {}, [], collections.deque([("", 0)]), 0
        while pending:
            relative, depth = pending.popleft()
            try:
                with os.scandir(self.root / relative) as entries:
                    listed = sorted(entries, key=lambda entry: entry.name)
            except OSError as exc:
                notes.append(f"{relative}: {records.reason(exc)}: not compared")
                continue
            for entry in listed:
                seen += 1
                if seen > MAX_ENTRIES:
                    return found, [
                        *notes,
                        f"{self.root}: past {MAX_ENTRIES} entries: the rest not compared",
                    ]
                path = f"{relative}/{entry.name}" if relative else entry.name
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:  # gone since it was listed
                    continue
                if not stat.S_ISDIR(info.st_mode):
                    found[path] = (info.st_ctime_ns, info.st_mtime_ns, info.st_size, info.st_ino)
                elif self._entered(entry, info, device) and depth < MAX_DEPTH:
                    pending.append((path, depth + 1))
                elif depth >= MAX_DEPTH and self._entered(entry, info, device):
                    notes.append(f"{path}: past {MAX_DEPTH} folders deep: not compared")
        return found, notes

    def _entered(self, entry: os.DirEntry, info: os.stat_result, device: int) -> bool:
        """Whether a folder may hold the run's output: not one skipped, a mount (the results and data folders,
        whose files stay with the host) nor a venv."""
        if entry.name in SKIPPED or (info.st_dev, info.st_ino) in self.skipped or info.st_dev != device:
            return False
        return not os.path.lexists(os.path.join(entry.path, "pyvenv.cfg"))


def watch(results: Path) -> Watch | None:
    """The project folder's stamps before the command, where the run is in a container (else None: nothing to do).
    The results and data folders are never compared, wherever they are mounted."""
    root = os.environ.get(PROJECT_VARIABLE)
    if not root:
        return None
    skipped = set()
    for folder in (results, os.environ.get(DATA_VARIABLE)):
        with contextlib.suppress(OSError, TypeError):
            info = os.stat(folder)
            skipped.add((info.st_dev, info.st_ino))
    return Watch(Path(root), skipped)


def keep(watched: Watch, folder: Path, results: Path) -> dict:
    """Copy what the run created or changed in the project into ``folder``/files; the run block's project_files."""
    changed, left_out = watched.changed()
    copied, total = [], 0
    for path in changed:
        if len(copied) >= MAX_FILES:
            left_out.append(f"{path}: past {MAX_FILES} files, more than a run keeps")
            continue
        target = Path(folder, FOLDER, path)
        try:
            size, sha256 = _copy(watched.root, path, folder, MAX_BYTES - total)
        except (OSError, records.Unreadable) as exc:
            left_out.append(f"{path}: {exc if isinstance(exc, records.Unreadable) else records.reason(exc)}")
            continue
        total += size
        copied.append({"path": path, "size": size, "sha256": sha256, "copy": target.relative_to(results).as_posix()})
    for line in left_out[:MAX_NAMED]:
        records.warn(f"{line}: not kept")
    if len(left_out) > MAX_NAMED:
        left_out[MAX_NAMED:] = [f"and {len(left_out) - MAX_NAMED} more"]
    return {"project": str(watched.root), "copied": copied, "left_out": left_out}


def _copy(root: Path, path: str, folder: Path, budget: int) -> tuple[int, str]:
    """Copy the regular file ``path`` below ``root`` to ``folder``/files/``path``; its size and sha256. Both ends are
    opened a folder at a time without following a link; a copy cut short is removed."""
    *parents, name = path.split("/")
    with _folder(root, parents, create=False) as source_folder:
        try:
            source = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=source_folder)
        except OSError as exc:
            raise records.Unreadable(_why(exc, name, source_folder)) from None
    try:
        info = os.fstat(source)
        if not stat.S_ISREG(info.st_mode):
            raise records.Unreadable(f"{records.file_kind(info.st_mode)}, not a regular file")
        if info.st_size > budget:
            raise records.Unreadable(
                f"{info.st_size} bytes, more than the {budget} bytes left of the {MAX_BYTES} a run keeps"
            )
        with _folder(folder, [FOLDER, *parents], create=True) as target_folder:
            target = os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=target_folder
            )
            try:
                return _stream(source, target, info.st_size)
            except BaseException:
                os.unlink(name, dir_fd=target_folder)
                raise
            finally:
                os.close(target)
    finally:
        os.close(source)


def _stream(source: int, target: int, size: int) -> tuple[int, str]:
    """At most ``size`` bytes (the file as it stood when opened: a child still writing does not stretch it)."""
    digest, done = hashlib.sha256(), 0
    while done < size and (chunk := os.read(source, min(_CHUNK, size - done))):
        digest.update(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(target, view) :]
        done += len(chunk)
    return done, digest.hexdigest()


@contextlib.contextmanager
def _folder(top: Path, parts: list[str], create: bool):
    """A descriptor of the folder ``top``/``parts``, each part opened without following a link (made if
    ``create``: the run's own folder's files/)."""
    handle = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the root as named: a link there is the user's
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=handle)
            try:
                inner = os.open(part, _DIRECTORY, dir_fd=handle)
            except OSError as exc:
                raise records.Unreadable(f"{part}: {_why(exc, part, handle)}") from None
            os.close(handle)
            handle = inner
        yield handle
    finally:
        os.close(handle)


def _why(error: OSError, name: str, folder: int) -> str:
    """Why ``name`` in ``folder`` did not open: O_NOFOLLOW's ELOOP, or O_DIRECTORY's ENOTDIR, may be a link."""
    try:
        link = error.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(
            os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
        )
    except OSError:
        link = False
    return "a symbolic link, not followed" if link else records.reason(error)

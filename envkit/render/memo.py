"""Remember a render by what it read, so an unchanged project renders without Jinja or YAML.

`envkit render` is run by make before every experiment and by editors on save; most runs
render exactly what the last one did. The memo is right by construction: a render runs inside
envkit.support.bounded_load.recording(), and every file it reads goes through that one reader, which
records it as it is read (a file tried and absent too: a lock or a template override appearing is a
change). What a reader cannot open is noted where it is looked at (a folder's listing, git's index, a
module whose parse is cached in the process), and a render whose inputs are more than files (a folder
walked whole, outside git) is not remembered. The memo stores the rendered files with the sha256 of each
of those paths, and of envkit's own package (its code and data, told apart by each file's size and times as git's
index does, and by its bytes where it just changed); a later render of the same config and
selection whose paths all hash the same is that render, so its files are written from the memo and
neither Jinja, PyYAML nor the config schema is imported. Any difference, a missing or unreadable entry,
or a new envkit is a miss, and a miss renders in full. Errors are never remembered: bad input always
reaches the code that explains it.

An entry is keyed by the config's resolved path (its directory is the project root a render
reads from) and records every path absolute, as typed, never resolved: the same file from any working
directory, and a symlink now pointing elsewhere is read through again. A file is absent only when
nothing, not even a dangling symlink, stands at its path; one that cannot be read is a miss, so the full
render explains it. A file's permission bits and whether it is a link are part of its digest; a folder is
hashed by the names it holds.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import time
from pathlib import Path

from envkit import __version__
from envkit.support.bounded_load import VOLATILE, Refused, parse_json, read_bytes, sha256
from envkit.support.cache import cache_dir, keep, used

PACKAGE = Path(__file__).resolve().parent.parent


# Renders remembered: one per project and selection (a target, --all) rendered lately is what saves time.
MEMO_ENTRIES = 128


def _entry(config: Path, selection: str) -> Path:
    # realpath, not Path.resolve: a config that is a symlink loop must reach the code that explains it.
    key = json.dumps([__version__, os.path.realpath(config), selection])
    return cache_dir() / "render-memo" / f"{hashlib.sha256(key.encode()).hexdigest()}.json"


def _digest(path: str) -> str | None:
    """The file's sha256 with its permission bits and whether it is a link, or a folder's names'; None when
    nothing is there (no lock yet is a state too: a lock appearing is a change). Raises OSError or Refused when
    something is there that cannot be read. A file's mode and link-ness are read like its bytes: a notebook lists
    the executable files it carries, and the project's files leave links out."""
    if os.path.isdir(path) and not os.path.islink(path):
        return (
            "folder:"
            + hashlib.sha256("\0".join(sorted(os.listdir(path))).encode("utf-8", "surrogateescape")).hexdigest()
        )
    try:
        digest = sha256(path)
    except (FileNotFoundError, NotADirectoryError):
        if os.path.lexists(path):
            raise
        return None
    link = "link:" if os.path.islink(path) else ""
    return f"{link}{stat.S_IMODE(os.stat(path).st_mode):o}:{digest}"


def recall(config: Path, selection: str) -> dict | list | None:
    """The remembered render of ``selection`` (a target name or "--all"): what remember() was given, or None."""
    try:
        kept = _entry(config, selection)
        entry = parse_json(read_bytes(kept))
        if entry["code"] != _code_digest(PACKAGE) or any(
            _digest(path) != digest for path, digest in entry["read"].items()
        ):
            return None
        used(kept)
        return entry["render"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remember(config: Path, selection: str, render: dict | list, read: set[str]) -> None:
    """Store a successful render (JSON-able) with the digest of every path it read (``read``, as recorded)."""
    if VOLATILE in read:
        return
    package = str(PACKAGE) + os.sep
    try:
        paths = {path for path in read if not path.startswith(package)} | {os.path.abspath(config)}
        entry = {
            "code": _code_digest(PACKAGE),
            "read": {path: _digest(path) for path in sorted(paths)},
            "render": render,
        }
    except (OSError, Refused):
        return  # a file that changed into one envkit refuses: the next render is a miss, which only costs time
    keep(_entry(config, selection), json.dumps(entry, sort_keys=True).encode(), at_most=MEMO_ENTRIES)


# A write within the same tick of the file system's clock may leave a file's times as they were (git's "racily
# clean" index entries): a file changed this recently is identified by its bytes too.
RACY_NS = 2 * 10**9


# Once per process: the code that runs is the code loaded when the process started.
@functools.cache
def _code_digest(package: Path) -> str:
    """The sha256 of what identifies envkit's own package, every module and data file under ``package``: a changed one
    may change what a render gives, and envkit reads its data tables through caches that outlive one render. Each file
    by its size, modification and change times and inode, as git's index tells a changed file (a write sets the change
    time, which no tool sets back), and by its bytes as well while that time is within RACY_NS of now: reading and
    hashing every file cost each remembered render about 6 ms of CPU (benchmarks/bench_render.py)."""
    # os.walk and strings, not Path.rglob or Path objects: rglob's pattern matching cost more than reading and
    # hashing the files, and a Path per file about 2 ms (remembered renders ran it every time, bench_render.py); each
    # file's name under the package as one string, one update each: 0.3 ms less than tuples of parts (issue 42).
    top = os.path.join(package, "")
    files = []
    for folder, folders, names in os.walk(package):
        folders[:] = [name for name in folders if name != "__pycache__"]
        under = os.path.join(folder, "").removeprefix(top).replace(os.sep, "/")
        files += [under + name for name in names]
    digest = hashlib.sha256()
    now = time.time_ns()
    for name in sorted(files):
        path = top + name
        try:
            found = os.stat(path)
        except FileNotFoundError:
            continue  # gone since the walk
        if not stat.S_ISREG(found.st_mode):
            continue
        digest.update(f"{name}\0{found.st_size}:{found.st_mtime_ns}:{found.st_ctime_ns}:{found.st_ino}\0".encode())
        if now - found.st_ctime_ns < RACY_NS:
            digest.update(read_bytes(path) + b"\0")
    return digest.hexdigest()

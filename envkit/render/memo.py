"""Remember a render by what it read, so an unchanged project renders without Jinja or YAML.

`envkit render` is run by make before every experiment and by editors on save; most runs
render exactly what the last one did. A render reads the config, envkit's data tables,
the templates, each target's lock and CA certificates, and envkit's own code. The memo
stores the rendered files with the sha256 of each of those files; a later render of the
same config and selection whose files all hash the same is that render, so its files are
written from the memo and neither Jinja, PyYAML nor the config schema is imported.
Any difference, a missing or unreadable entry, or a new envkit version is a miss, and a
miss renders in full. Errors are never remembered: bad input always reaches the code
that explains it.

An entry is keyed by the config's resolved path (its directory is the project root a render
reads from) and records every file by its absolute path, as typed, never resolved: the same
file from any working directory, and a symlink now pointing elsewhere is read through again.
A file is absent only when nothing, not even a dangling symlink, stands at its path; one that
cannot be read is a miss, so the full render explains it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

from envkit import __version__
from envkit.render.output import RenderedFile
from envkit.support.bounded_load import Refused, parse_json, read_bytes, sha256
from envkit.support.cache import cache_dir, keep

PACKAGE = Path(__file__).resolve().parent.parent


def _entry(config: Path, selection: str) -> Path:
    # realpath, not Path.resolve: a config that is a symlink loop must reach the code that explains it.
    key = json.dumps([__version__, os.path.realpath(config), selection])
    return cache_dir() / "render-memo" / f"{hashlib.sha256(key.encode()).hexdigest()}.json"


def _digest(path: str) -> str | None:
    """The file's sha256; None when nothing is there (no lock yet is a state too: a lock appearing is a
    change). Raises OSError or Refused when something is there that cannot be read."""
    try:
        return sha256(path)
    except (FileNotFoundError, NotADirectoryError):
        if os.path.lexists(path):
            raise
        return None


def recall(config: Path, selection: str) -> tuple[list[str], list[RenderedFile]] | None:
    """The remembered render of ``selection`` (a target name or "--all"), or None."""
    try:
        entry = parse_json(read_bytes(_entry(config, selection)))
        if entry["code"] != _code_digest(PACKAGE) or any(
            _digest(path) != digest for path, digest in entry["read"].items()
        ):
            return None
        return entry["names"], [RenderedFile(Path(path), text, mode) for path, text, mode in entry["files"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remember(config: Path, selection: str, names: list[str], files: list[RenderedFile], read: list[Path]) -> None:
    """Store a successful render with the digest of every file it read (``read``)."""
    try:
        read_paths = {os.path.abspath(path) for path in read} | {str(config.resolve())}
        entry = {
            "code": _code_digest(PACKAGE),
            "read": {path: _digest(path) for path in sorted(read_paths)},
            "names": names,
            "files": [[file.path.as_posix(), file.text, file.mode] for file in files],
        }
    except (OSError, Refused):
        return  # a file that changed into one envkit refuses: the next render is a miss, which only costs time
    keep(_entry(config, selection), json.dumps(entry, sort_keys=True).encode())


# Once per process: `envkit render` recalls its image files and its notebooks, two entries each keyed by
# it, and the code that runs is the code loaded when the process started.
@functools.cache
def _code_digest(package: Path) -> str:
    """The sha256 of envkit's own source (every module under ``package``): a changed module may change what a
    render gives."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + read_bytes(path) + b"\0")
    return digest.hexdigest()

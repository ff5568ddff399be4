"""Rendered files: written all or nothing, or compared with what is on disk.

Every changed file is staged by envkit.support.atomic before any replaces its
destination, so a failure never leaves a half-written tree behind. No Jinja here:
a render the memo remembers (envkit.render.memo) is written without importing it.
"""

from __future__ import annotations

import difflib
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.support.atomic import atomic_stream

DEFAULT_OUTPUT = Path("docker")


@dataclass(frozen=True)
class RenderedFile:
    path: Path  # relative to the output directory: <target>/<file>
    text: str
    mode: int


def write(output: Path, files: list[RenderedFile]) -> list[Path]:
    """Write every changed file or none: stage temp files, then rename them into place.

    Unchanged files are left alone so that their timestamps do not make `make`
    rebuild images. Returns the paths written.
    """
    if output.exists() and not output.is_dir():
        raise EnvkitError(f"output path {output} is a file; pass --output DIR with a directory")
    created: list[Path] = []
    written: list[Path] = []
    try:
        # Every changed file is staged before the first one replaces its destination.
        with ExitStack() as staged:
            for file in files:
                destination = output / file.path
                if _difference(destination, file) is None:
                    continue
                if destination.is_dir():
                    raise IsADirectoryError(21, "a directory is in the way", str(destination))
                _make_dirs(destination.parent, created)
                staged.enter_context(atomic_stream(destination, mode=file.mode)).write(file.text.encode("utf-8"))
                written.append(destination)
    except OSError as exc:
        for directory in reversed(created):
            _remove_if_empty(directory)
        reason = exc.strerror or str(exc)
        raise EnvkitError(f"cannot write to {exc.filename or output}: {reason}; choose a writable --output DIR") from None
    return written


def _make_dirs(directory: Path, created: list[Path]) -> None:
    missing = []
    for parent in [directory, *directory.parents]:
        if parent.is_dir():
            break
        missing.append(parent)
    for parent in reversed(missing):
        if parent.exists() and not parent.is_dir():
            raise NotADirectoryError(20, "exists and is not a directory", str(parent))
        parent.mkdir()
        created.append(parent)


def _remove_if_empty(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:
        pass


def stale(output: Path, files: list[RenderedFile]) -> list[str]:
    """One line per committed file that differs from a fresh render."""
    problems = (_difference(output / file.path, file) for file in files)
    return [f"{output / file.path}: {problem}" for file, problem in zip(files, problems) if problem]


def _difference(path: Path, file: RenderedFile) -> str | None:
    """How the file on disk differs from the rendered one, or None when it does not."""
    try:
        current = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except (OSError, UnicodeDecodeError) as exc:
        return f"unreadable ({exc})"
    if current != file.text:
        changed = sum(
            1
            for line in difflib.unified_diff(current.splitlines(), file.text.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        )
        return f"stale ({changed} changed lines)"
    if _executable(path.stat().st_mode) != _executable(file.mode):
        # Only the executable bit: git records nothing else, and umasks differ.
        return f"{'should' if _executable(file.mode) else 'should not'} be executable"
    return None


def orphans(output: Path, names: list[str]) -> list[str]:
    """Rendered target directories left behind by targets no longer in the config."""
    if not output.is_dir():
        return []
    leftovers = sorted(
        child for child in output.iterdir() if child.is_dir() and child.name not in names and (child / "Dockerfile").is_file()
    )
    return [f"{child}: not a target in the config (remove it)" for child in leftovers]


def _executable(mode: int) -> bool:
    return bool(mode & 0o111)

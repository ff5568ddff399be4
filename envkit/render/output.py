"""Rendered files: written all or nothing, or compared with what is on disk.

Every changed file is staged by envkit.support.atomic before any replaces its
destination, so a failure never leaves a half-written tree behind. No Jinja here:
a render the memo remembers (envkit.render.memo) is written without importing it,
nor dataclasses (inspect), difflib (only a stale file is diffed) or the run wrapper's
module (only `render --all` looks for leftovers): those imports were a fifth of a
remembered render's time (benchmarks/bench_render.py).
"""

from contextlib import ExitStack
from pathlib import Path
from typing import NamedTuple

from envkit.errors import EnvkitError
from envkit.project import marks
from envkit.project.marks import begins_with
from envkit.support.atomic import abandoned, atomic_stream
from envkit.support.bounded_load import Refused, read_text


class RenderedFile(NamedTuple):
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
    refuse_the_users(output, files)
    for leftover in abandoned_partials(output, files):
        leftover.unlink(missing_ok=True)
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
        raise EnvkitError(
            f"cannot write to {exc.filename or output}: {reason}; choose a writable --output DIR"
        ) from None
    return written


def refuse_the_users(output: Path, files: list[RenderedFile]) -> None:
    """One line naming the first file render would replace that lacks envkit's mark: the user's, never
    overwritten (checked before anything is written, so nothing is)."""
    for file in files:
        destination = output / file.path
        if destination.is_dir() and not destination.is_symlink():
            continue  # write() says a directory is in the way
        if (destination.exists() or destination.is_symlink()) and _difference(destination, file) is not None:
            if destination.is_symlink() or not marks.written_by_envkit(destination):
                raise EnvkitError(
                    f'{destination} is not envkit\'s (it lacks the mark "{marks.RENDERED.decode().strip()}" that '
                    f"render writes): render never overwrites it; move it away, or render into another folder "
                    f"with --output DIR"
                )


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
    """One line per committed file that differs from a fresh render, and per file a killed render left."""
    problems = (_difference(output / file.path, file) for file in files)
    lines = [f"{output / file.path}: {problem}" for file, problem in zip(files, problems) if problem]
    return lines + [
        f"{path}: left by a render that was killed; `envkit render` removes it"
        for path in abandoned_partials(output, files)
    ]


def abandoned_partials(output: Path, files: list[RenderedFile]) -> list[Path]:
    """The staged files of ``files`` whose writing render was killed (SIGKILL runs no cleanup)."""
    wanted: dict[Path, set[str]] = {}
    for file in files:
        wanted.setdefault((output / file.path).parent, set()).add(file.path.name)
    found = []
    for folder, names in sorted(wanted.items()):
        try:
            children = sorted(folder.iterdir())
        except OSError:
            continue  # no folder yet: nothing was staged in it
        found += [child for child in children if abandoned(child) in names]
    return found


def _difference(path: Path, file: RenderedFile) -> str | None:
    """How the file on disk differs from the rendered one, or None when it does not."""
    try:
        current = read_text(path)
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    except Refused as exc:
        return f"unreadable ({exc.reason})"
    if current != file.text:
        import difflib

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


def envkit_marks() -> dict[str, bytes]:
    """How the files render writes into docker/<target>/ begin (its three templates and the run wrapper's files it
    copies): render removes only what it wrote. A file without its mark is someone else's, and so is a
    lock (`envkit lock` wrote it): render keeps both, and --check does not ask for their removal."""
    from envkit.support.provenance_records import shipped

    return {
        "Dockerfile": marks.RENDERED,
        "run.sh": marks.RENDERED,
        ".dockerignore": marks.RENDERED,
        **dict.fromkeys(shipped(), marks.WRAPPER),
    }


def leftovers(output: Path, names: list[str]) -> dict[Path, list[Path]]:
    """The files render wrote for targets no longer in the config, by their directory under ``output``."""
    if not output.is_dir():
        return {}
    found = {}
    for child in sorted(output.iterdir()):
        if child.is_dir() and not child.is_symlink() and child.name not in names and not _copied(child):
            # A link is the user's, wherever it points (the mark read through it is another file's): render wrote none.
            ours = [
                child / name
                for name, mark in envkit_marks().items()
                if not (child / name).is_symlink() and begins_with(child / name, mark)
            ]
            if ours:
                found[child] = ours
    return found


def _copied(directory: Path) -> bool:
    """Whether the folder's Dockerfile or run.sh carries the mark render wrote for another target: the user copied
    a target's folder to make a variant of their own (a copy of the cpu folder named mine), and all of it is theirs."""
    own = f'target "{directory.name}"'.encode()
    return any(
        marks.RENDERED in start and b"target " in start and own not in start
        for start in (marks.head(directory / name) for name in ("Dockerfile", "run.sh"))
    )


def orphans(output: Path, names: list[str]) -> list[str]:
    """One line per directory of a target no longer in the config, saying what `render --all` removes."""
    lines = []
    for directory, files in leftovers(output, names).items():
        kept = sorted(p.name for p in directory.iterdir() if p not in files)
        also = f"; it keeps {', '.join(kept)}, which render did not write" if kept else ""
        lines.append(
            f"{directory}: not a target in the config: `envkit render --all` removes "
            f"{', '.join(p.name for p in files)}{also}"
        )
    return lines


def remove_leftovers(output: Path, names: list[str]) -> list[Path]:
    """Remove what render wrote for targets no longer in the config (and the directory once empty)."""
    removed = []
    for directory, files in leftovers(output, names).items():
        remove(files)
        _remove_if_empty(directory)
        removed.append(directory)
    return removed


def remove(paths: list[Path]) -> None:
    for path in paths:
        try:
            path.unlink()
        except OSError as exc:
            raise EnvkitError(f"cannot remove {path}: {exc.strerror or exc}") from None


def _executable(mode: int) -> bool:
    return bool(mode & 0o111)

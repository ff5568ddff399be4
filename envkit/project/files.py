"""The project's files that an image holds and a notebook carries: what git tracks, less what the
project's ``.dockerignore`` excludes, under a size limit.

git's list, not the folder: a data set, checkpoints or a venv beside the code never enter an image
or a notebook, whether or not the user remembered to ignore them. ``.dockerignore`` is read with the
Docker SDK's own matcher (Docker's rules: ``**``, ``!`` exceptions, a folder excludes what it holds).
A folder that is not a git work tree is handled, not refused: every file under it that
``.dockerignore`` does not exclude, and the caller says so.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.project import NOTEBOOKS, RENDERED
from envkit.support.bounded_load import load_text
from envkit.support.docker_client import docker_sdk

IGNORE_FILE = ".dockerignore"
DEFAULT_LIMIT_MB = 100
# Named in the refusal: enough to find the culprit, few enough for one line.
LARGEST_NAMED = 3
# What envkit writes in a project is never its files: render's output (docker/, staged into an image beside
# the project's files; notebooks/, whose committed notebooks cannot carry themselves), made from envkit.yaml.
ENVKIT_OUTPUT = (RENDERED.as_posix(), NOTEBOOKS.as_posix())
# In a folder git does not track, also the runs' data and results (run.sh's defaults), the venvs, the caches
# (make's render stamp in .cache/ among them) and editors' folders, which a repository's .gitignore keeps out:
# else every run would change the next image.
UNTRACKED_OUTPUT = (
    "results",
    "data",
    ".venv*",
    ".git",
    "**/.cache",
    "**/.*_cache",
    "**/.ipynb_checkpoints",
    ".idea",
    ".vscode",
    "**/__pycache__",
    "**/*.pyc",
)


@dataclass(frozen=True)
class ProjectFiles:
    root: Path
    paths: tuple[str, ...]  # relative, POSIX, sorted
    sizes: tuple[int, ...]
    tracked: bool  # git's list (True), or every file of a folder that is not a git work tree

    @property
    def total(self) -> int:
        return sum(self.sizes)

    def source(self) -> str:
        """Where the list came from, for the line that reports it."""
        if self.tracked:
            return f"the files git tracks in {self.root}"
        return f"every file under {self.root} ({self.root} is not a git work tree, so there is no tracked list)"


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _ignore_patterns(root: Path) -> list[str]:
    path = root / IGNORE_FILE
    if not path.is_file():
        return []
    lines = (line.strip() for line in load_text(path).splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def in_work_tree(root: Path) -> bool:
    """Whether ``root`` is in a git work tree (its own or a parent's); False where git is not installed."""
    try:
        inside = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"], capture_output=True, text=True, check=False
        )
    except OSError:
        return False  # no git on this machine: the folder is listed instead, and the caller says so
    return inside.stdout.strip() == "true"


def git_index(root: Path) -> Path | None:
    """The index of the work tree ``root`` is in (it changes when a file is tracked or untracked), if any."""
    if not in_work_tree(root):
        return None
    found = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--path-format=absolute", "--git-path", "index"],
        capture_output=True,
        text=True,
        check=False,
    )
    return Path(found.stdout.strip()) if found.returncode == 0 and found.stdout.strip() else None


def _tracked(root: Path) -> list[str] | None:
    """git's tracked paths under ``root`` (relative to it), or None when ``root`` is in no work tree."""
    if not in_work_tree(root):
        return None
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--full-name", "--", "."],
        capture_output=True,
        check=False,
    )
    if listed.returncode != 0:
        raise EnvkitError(f"git ls-files in {root} failed: {listed.stderr.decode(errors='replace').strip()}")
    top = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
    ).stdout.strip()
    prefix = root.resolve().relative_to(Path(top).resolve())
    names = [name for name in listed.stdout.decode().split("\0") if name]
    return [Path(name).relative_to(prefix).as_posix() if prefix != Path(".") else name for name in names]


def _top(name: str) -> str:
    return name.split("/", 1)[0]


def _walked(root: Path, patterns: list[str]) -> list[str]:
    sdk = docker_sdk()
    return sorted(path for path in sdk.utils.build.exclude_paths(str(root), patterns) if (root / path).is_file())


def project_files(root: Path, limit_mb: int = DEFAULT_LIMIT_MB) -> ProjectFiles:
    """The project's files, or one line naming the largest when together they pass ``limit_mb``."""
    root = Path(root).resolve()
    patterns = _ignore_patterns(root)
    tracked = _tracked(root)
    if tracked is None:
        names = _walked(root, [*patterns, *ENVKIT_OUTPUT, *UNTRACKED_OUTPUT])
    else:
        matcher = docker_sdk().utils.build.PatternMatcher(patterns)
        names = sorted(name for name in tracked if not matcher.matches(name) and _top(name) not in ENVKIT_OUTPUT)
    paths, sizes = [], []
    for name in names:
        path = root / name
        # A deleted tracked file is not in the tree; a symlink or a submodule is not a file the image can hold.
        if path.is_symlink() or not path.is_file():
            continue
        paths.append(name)
        sizes.append(os.stat(path).st_size)
    files = ProjectFiles(root, tuple(paths), tuple(sizes), tracked is not None)
    if files.total > limit_mb * 1_000_000:
        largest = sorted(zip(files.sizes, files.paths, strict=True), reverse=True)[:LARGEST_NAMED]
        named = ", ".join(f"{name} ({_megabytes(size)})" for size, name in largest)
        raise EnvkitError(
            f"{files.source()} come to {_megabytes(files.total)}, over the {limit_mb} MB limit for an image or "
            f"a notebook; the largest: {named}. List data in {IGNORE_FILE} (experiments read it from "
            f"ENVKIT_DATA_DIR), or raise files_limit_mb in envkit.yaml"
        )
    return files

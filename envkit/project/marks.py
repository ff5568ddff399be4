"""How the files envkit writes into a project begin: its mark, which tells them from the user's own.

`envkit render` overwrites or removes only a file that carries envkit's mark, and the project's files
(envkit.project.files) leave out only what envkit wrote in its output folders; a file without the mark is
the user's, kept and carried. The marks are the first lines of templates/ (Dockerfile, run.sh,
.dockerignore, a notebook's first cell), of the run wrapper (envkit/support/provenance.py), of a lock
(envkit.lock.lockfile), of a launch job's files (envkit.launch), of a push record (envkit.image.pushed)
and of a host venv's mark file (envkit.host.venv).
"""

from __future__ import annotations

import os
from pathlib import Path

from envkit.support.bounded_load import Refused, open_regular

RENDERED = b"Rendered by envkit from "  # the templates' files, "from experiment ..." in a notebook
NOTEBOOK = b"Rendered by envkit from experiment "
WRAPPER = b'"""envkit\'s run wrapper: '
ANY_LOCK = b"# envkit lock for "  # a target's lock, or a requirements input's (`envkit lock --requirements dev.in`)
LOCK = ANY_LOCK + b"target "
LAUNCH = b"# Rendered by envkit launch: "  # an sbatch script, a Kubernetes manifest, a SkyPilot task
# A venv's mark is a file of its own at its top (a folder has no head): `envkit venv` writes it as soon as
# `python -m venv` has made the folder, and replaces only a folder holding it (envkit.host.venv).
VENV_FILE = "envkit-venv.txt"
VENV = b"Made by envkit venv: "
PUSHED = b'"format": '  # a push record is JSON: {"format": 1, ..., "target": ...} with its keys sorted
# A notebook's mark is in its first cell, after nbformat's JSON preamble; run.sh's follows its #! line.
WITHIN = 4096


def head(path: Path, within: int = WITHIN) -> bytes:
    """The file's first ``within`` bytes; empty when it is not a regular file or cannot be read."""
    try:
        with open_regular(path) as stream:
            return stream.read(within)
    except (OSError, Refused):
        return b""


def begins_with(path: Path, mark: bytes, within: int = WITHIN) -> bool:
    """Whether ``mark`` is in the first ``within`` bytes of the file."""
    return mark in head(path, within)


def foreign(path: Path, *ours: bytes) -> bool:
    """Whether something stands at ``path`` that envkit did not write: a link, or a file whose head carries none of
    ``ours``. envkit never writes over or replaces it (render, notebook, launch, lock)."""
    if not os.path.lexists(path):
        return False
    start = b"" if path.is_symlink() else head(path)
    return not any(mark in start for mark in ours)


def notebook_mark(target: str, experiment: str) -> bytes:
    """The mark of the committed notebook of ``experiment`` for ``target``: one the user moved elsewhere names
    another place, and is the user's."""
    return NOTEBOOK + f"`{experiment}` and target `{target}`".encode()


def written_by_envkit(path: Path) -> bool:
    """Whether the file at ``path`` carries one of envkit's marks."""
    start = head(path)
    return any(mark in start for mark in (RENDERED, WRAPPER, LOCK)) or (
        start.startswith(b"{") and PUSHED in start[:64] and path.suffix == ".json"
    )

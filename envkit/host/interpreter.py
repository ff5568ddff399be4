"""The Python interpreter a run uses: whether a given one runs here (`envkit experiment --python PY`), its full
version, and the lock the venv this interpreter runs in was made from (its marker, which envkit.host.venv writes).

Apart from envkit.host.venv, which makes venvs: `envkit experiment --python` checks an interpreter on every run and
needs none of the locks, installers and logs that making one imports (issue 42). Standard library only, as
envkit.host.venv is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.support.bounded_load import load_json
from envkit.support.cache import remembered

# In the venv's root; recipes/harness/records.py reads it by this name (tests/host/test_venv.py checks both agree).
MARKER = "envkit-lock.json"
_VERSION_PROBE = "import sys; print('%d.%d.%d' % sys.version_info[:3])"


def check_interpreter(given: str) -> str:
    """The path of ``given``, a Python interpreter that runs here; else one line saying what it is instead.

    Checked before anything runs: a recipe started with /etc/passwd or a venv not made yet
    would fail in the shell (exit 127, three lines) after the plan's first lines were printed.
    """
    path = shutil.which(given)
    if path is None:
        if os.path.isdir(given):
            what = "is a directory"
        elif os.path.lexists(given):
            what = "is not executable"
        else:
            what = "does not exist" if os.sep in given else "is not on PATH"
        hint = (
            " (make it first: `make xla-env` makes .venv-xla, `envkit venv` any other)"
            if Path(given).parent.parent.name.startswith(".venv")  # .venv-xla/bin/python
            else ""
        )
        raise EnvkitError(f"--python {given} {what}: give a Python interpreter{hint}")
    if not _runs(path):
        raise EnvkitError(f"--python {given} is not a Python interpreter: `{given} -c 'import sys'` does not run")
    return path


def _runs(python: str) -> bool:
    """Whether ``python`` runs: started once, then remembered by its path, size and mtime, since starting it cost
    each `envkit experiment --python` 30-50 ms (issue 42)."""
    try:
        real = os.path.realpath(python)
        found = os.stat(real)
    except OSError:
        return version(python) is not None
    key = f"{python}\0{real}\0{found.st_size}\0{found.st_mtime_ns}"
    return remembered("interpreters", key, lambda: version(python) is not None)


def version(python: str) -> str | None:
    """The full version of the Python at ``python`` (3.11.7), or None where it does not run."""
    try:
        done = subprocess.run([python, "-c", _VERSION_PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def interpreter_lock() -> dict | None:
    """The marker of the venv this interpreter runs in ({"lock": path, "lock_sha256": ...}), or None."""
    path = Path(sys.prefix, MARKER)
    try:
        marker = load_json(path) if path.is_file() else None
    except EnvkitError:
        return None
    return marker if isinstance(marker, dict) and isinstance(marker.get("lock_sha256"), str) else None


def describe_interpreter() -> str:
    """This interpreter and the lock its runs will name, for the plans' notes."""
    marker = interpreter_lock()
    if marker is None:
        return f"{sys.executable} (made from no lock: its results record lock_sha256 null)"
    return (
        f"{sys.executable} (made from {marker.get('lock')}: its results name lock sha256 {marker['lock_sha256'][:12]})"
    )

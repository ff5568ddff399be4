"""What every module of envkit's notebook helper shares (envkit/notebook/runtime.py, shipped beside it): the
notebook's folders and variables, its one-line stop (NotebookStop), CPU mode, and how it names files and packages.

Standard library only, and no import of envkit but the run wrapper's (shipped beside it): it runs in the notebook
platform's own kernel.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

try:  # in envkit
    from ..support.provenance_records import RESULTS_FOLDER
except ImportError:  # in a notebook, beside the run wrapper's modules, which own the results folder's name
    from provenance_records import RESULTS_FOLDER

CPU_MODE = "ENVKIT_NOTEBOOK_CPU"
OUTPUT = "ENVKIT_NOTEBOOK_OUTPUT"
VENV = Path("venv")
RESULTS = Path(RESULTS_FOLDER)
DATA = Path("data")
REPORT = Path("report")  # envkit's report code, embedded: imported from here
EXPERIMENTS = "experiments.json"  # the notebook's experiment as the project defines it, beside the report code


class NotebookStop(Exception):
    """A step cannot go on: shown as one line, and the notebook stops there."""


def _show_one_line(shell, etype, value, tb, tb_offset=None) -> list[str]:
    lines = [f"envkit: {value}"]
    show = getattr(shell, "_showtraceback", None)  # how IPython (and ipykernel) send an error output
    if show is not None:
        show(etype, value, lines)
    else:
        print(lines[0], file=sys.stderr)
    return lines


def _one_line_errors() -> None:
    # IPython shows a NotebookStop as its message alone (no traceback); the cell still fails,
    # so "Run all" stops at it. Only where IPython already runs (a notebook's kernel): envkit imports this module
    # for its constants, and importing IPython would cost every notebook render a fifth of a second.
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return
    shell = ipython.get_ipython()
    if shell is not None:
        shell.set_custom_exc((NotebookStop,), _show_one_line)


_one_line_errors()


def cpu_mode() -> Path | None:
    """The wheelhouse of CPU mode, or None on a real accelerator."""
    folder = os.environ.get(CPU_MODE)
    return Path(folder) if folder else None


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def normalise(name: str) -> str:  # PEP 503, as envkit.lock.lockfile.normalise (the helper imports no envkit)
    return re.sub(r"[-_.]+", "-", name).lower()

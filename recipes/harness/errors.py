"""What a user can fix, said in one line: :class:`RecipeError`, and how a recipe ends on one.

Errors a user can fix are raised as :class:`RecipeError` (one line: what was wrong, what is
allowed); :func:`run_recipe` turns them into ``<recipe>: error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable
from typing import Any, TextIO


class RecipeError(Exception):
    """A problem the user can fix; the message is one line: what was wrong, what is allowed."""


def fail(prog: str, message: str) -> None:
    """Print ``<prog>: error: <message>`` as one line on stderr and exit with status 2."""
    one_line = " ".join(str(message).split())
    print_lines([f"{prog}: error: {one_line}"], sys.stderr)
    raise SystemExit(2)


def run_recipe(prog: str, main: Callable[[], Any]) -> None:
    """Run ``main()`` and exit: RecipeError -> one line + exit 2, Ctrl-C -> exit 130.

    Anything else is a bug in the recipe and keeps its traceback.
    """
    try:
        main()
    except RecipeError as exc:
        fail(prog, str(exc))
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None


def print_lines(lines: Iterable[str], stream: TextIO | None = None) -> None:
    """Print ``lines`` to ``stream`` (default stdout) in one write.

    Several processes (DDP ranks) share one stdout and stderr, and under PYTHONUNBUFFERED
    (set in every image) ``print`` writes the text and its newline separately,
    so two ranks' lines would run together. One small write to a pipe is atomic.
    """
    stream = stream or sys.stdout
    stream.write("".join(f"{line}\n" for line in lines))
    stream.flush()


def import_optional(module: str, what: str, install: str, instead: str | None = None):
    """Import an optional dependency, or RecipeError naming what to install (never a traceback)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        alternative = f"use {instead}, or " if instead else ""
        raise RecipeError(
            f"{what} needs {install}, which is not installed here; {alternative}pip install "
            f"{install}"
        ) from None

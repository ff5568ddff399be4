"""The files a notebook carries, so that nothing is cloned: found from the imports themselves.

A recipe brings the sibling modules it imports (recipes/ is flat: ``import harness``);
envkit's report brings the envkit modules it imports and the data files they name (as a
quoted file name).
Imports are read with ``ast`` (inside functions too), never executed, so a recipe that
gains or loses a helper module changes its notebooks without anyone listing files.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from envkit.errors import EnvkitError

HELPER = Path(__file__).with_name("runtime.py")
HELPER_NAME = "envkit_notebook.py"  # what the notebook imports it as
# The report the notebook shows is envkit's own (`envkit report --reference` and its plot).
REPORT_MODULES = ("envkit.runs.report", "envkit.runs.plot", "envkit.runs.results")


def _imported_names(path: Path) -> frozenset[str]:
    try:
        stat = path.stat()
    except OSError as exc:
        raise EnvkitError(f"cannot read {path} for its imports: {exc}") from None
    return _parsed_imports(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=None)
def _parsed_imports(path: Path, mtime_ns: int, size: int) -> frozenset[str]:
    """A file's imports; its time and size in the key, so an edited file is read again."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        raise EnvkitError(f"cannot read {path} for its imports: {exc}") from None
    names = set()
    for node in _statements(tree.body):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(names)


def _statements(nodes: list) -> Iterator[ast.AST]:
    """Every statement, nested ones included: imports are statements, so expressions need no visit
    (a tenth of ast.walk's nodes; rendering the committed notebooks parses every recipe and report module)."""
    for node in nodes:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            yield from _statements(getattr(node, field, None) or [])


def recipe_files(recipes: Path, recipe: str) -> list[Path]:
    """recipes/<recipe>.py and every module of recipes/ it imports, directly or not: the recipe first, then by name."""
    start = recipes / f"{recipe}.py"
    if not start.is_file():
        raise EnvkitError(f"recipe {start} not found")
    siblings = {path.stem for path in recipes.glob("*.py")}
    found, todo = {start}, [start]
    while todo:
        for name in _imported_names(todo.pop()):
            path = recipes / f"{name.split('.')[0]}.py"
            if name.split(".")[0] in siblings and path not in found:
                found.add(path)
                todo.append(path)
    return [start] + sorted(found - {start})


@lru_cache(maxsize=None)
def report_files(root: Path) -> list[Path]:
    """envkit's report modules, every envkit module they import (with its packages' __init__.py),
    and the files of envkit/data/ they name, sorted."""
    package = root / "envkit"
    data = {path.name: path for path in (package / "data").iterdir()}
    found: set[Path] = set()
    todo = [_module_path(root, name) for name in REPORT_MODULES]
    while todo:
        path = todo.pop()
        if path is None or path in found:
            continue
        found.add(path)
        for parent in path.relative_to(root).parents:
            if parent != Path("."):
                todo.append(root / parent / "__init__.py")
        todo += [_module_path(root, name) for name in _imported_names(path) if name.startswith("envkit")]
        if path.suffix == ".py":
            text = path.read_text(encoding="utf-8")
            found.update(data[name] for name in data if f'"{name}"' in text or f"'{name}'" in text)
    return sorted(found)


def _module_path(root: Path, name: str) -> Path | None:
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None  # a name imported from a module (a function, a class): its module is already listed

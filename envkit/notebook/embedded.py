"""The files a notebook carries, so that nothing is cloned.

A recipe brings the sibling modules it imports (recipes/ is flat: ``import harness``);
envkit's report brings the envkit modules it imports, the data files they name (as a
quoted file name) and the HTML page's template (under templates/, where envkit.support.packaged looks).
Imports are read with ``ast`` (inside functions too), never executed, so a recipe that
gains or loses a helper module changes its notebooks without anyone listing files.
A command experiment brings the project's files (envkit.project.files: git's tracked list less
.dockerignore's), each under a per-file cap: a notebook carries code, and downloads its data.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.runs.html_page import TEMPLATE as PAGE_TEMPLATE
from envkit.support.bounded_load import Refused, load_text, note, read_text
from envkit.support.packaged import packaged_templates

HELPER = Path(__file__).with_name("runtime.py")
HELPER_NAME = "envkit_notebook.py"  # what the notebook imports it as; its modules keep their names beside it
# The report the notebook shows is envkit's own (`envkit report --reference`, its plot and its HTML page).
# Every module show_report (runtime.py) imports; the closure adds what they import.
REPORT_MODULES = (
    "envkit.runs.formats",
    "envkit.runs.page_adapter",
    "envkit.runs.report",
    "envkit.runs.plot",
    "envkit.runs.results",
)
# A project file a notebook embeds weighs at most this. Code and configuration weigh kilobytes; a file of
# megabytes is data or weights, which a notebook downloads (into ENVKIT_DATA_DIR) rather than carries: the
# notebook is one JSON document that Colab and Kaggle load whole in the browser, its files in base64 (a third
# more), and every re-render of it is a commit of that size.
FILE_CAP_BYTES = 2_000_000
# Named in the refusal: enough to find the culprits, few enough for one line.
OVER_CAP_NAMED = 3


def _imported_names(root: Path, path: Path) -> frozenset[str]:
    """The absolute module names ``path`` imports (relative imports resolved within ``root``)."""
    note(path)  # read once per process: the render memo must see it on every render
    try:
        stat = path.stat()
    except OSError as exc:
        raise EnvkitError(f"cannot read {path} for its imports: {exc}") from None
    return _parsed_imports(root, path, stat.st_mtime_ns, stat.st_size)


@cache
def _parsed_imports(root: Path, path: Path, mtime_ns: int, size: int) -> frozenset[str]:
    """A file's imports; its time and size in the key, so an edited file is read again."""
    try:
        tree = ast.parse(read_text(path), filename=str(path))
    except OSError as exc:
        raise EnvkitError(f"cannot read {path} for its imports: {exc.strerror or exc}") from None
    except (SyntaxError, Refused) as exc:
        raise EnvkitError(f"cannot read {path} for its imports: {exc}") from None
    package = list(path.relative_to(root).with_suffix("").parts[:-1])  # the package a module (or __init__) is in
    names = set()
    for node in _statements(tree.body):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + (node.module.split(".") if node.module else []))
            if module:
                names.add(module)
                names.update(f"{module}.{alias.name}" for alias in node.names)
    return frozenset(names)


def _statements(nodes: list) -> Iterator[ast.AST]:
    """Every statement, nested ones included: imports are statements, so expressions need no visit
    (a tenth of ast.walk's nodes; rendering the committed notebooks parses every recipe and report module)."""
    for node in nodes:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            yield from _statements(getattr(node, field, None) or [])


def _closure(root: Path, start: list[Path], local) -> set[Path]:
    """``start`` and every module under ``root`` they import, directly or not, with their packages' __init__.py."""
    found: set[Path] = set()
    todo = list(start)
    while todo:
        path = todo.pop()
        if path is None or path in found:
            continue
        found.add(path)
        for parent in path.relative_to(root).parents:
            if parent != Path("."):
                todo.append(root / parent / "__init__.py")
        todo += [_module_path(root, name) for name in _imported_names(root, path) if local(name)]
    return found


def recipe_files(recipes: Path, recipe: str) -> list[Path]:
    """recipes/<recipe>.py and every module or package of recipes/ it imports, directly or not: the recipe
    first, then by path."""
    start = recipes / f"{recipe}.py"
    if not (start.exists() or start.is_symlink()):  # anything else there is named by the read that refuses it
        raise EnvkitError(f"recipe {start} not found")
    note(recipes)  # its listing: a module appearing may be imported
    siblings = {path.stem for path in recipes.glob("*.py")} | {
        path.parent.name for path in recipes.glob("*/__init__.py")
    }
    found = _closure(recipes, [start], lambda name: name.split(".")[0] in siblings)
    return [start] + sorted(found - {start})


def helper_files() -> dict[str, Path]:
    """The notebook helper (HELPER, as HELPER_NAME) and every module of envkit/notebook/ it imports, directly or
    not, by their names in the notebook: found from its imports as a recipe's modules are, so that a module the
    helper gains is carried without anyone listing it."""
    folder = HELPER.parent
    note(folder)  # its listing: a module appearing may be imported
    siblings = {path.stem for path in folder.glob("*.py")}
    found = _closure(folder, [HELPER], lambda name: name in siblings)
    return {HELPER_NAME: HELPER, **{path.name: path for path in sorted(found - {HELPER})}}


@cache
def report_files(root: Path) -> dict[str, Path]:
    """envkit's report modules, every envkit module they import (with its packages' __init__.py),
    the files of envkit/data/ they name, and the page's template, sorted, by their names under ``root``. The
    template is templates/<name> however envkit is installed (an installed wheel holds it in envkit/templates/):
    where envkit.support.packaged finds it in the notebook's report/ folder, and the same notebook from any install."""
    data = {path.name: path for path in (root / "envkit" / "data").iterdir()}
    found = _closure(
        root, [_module_path(root, name) for name in REPORT_MODULES], lambda name: name.startswith("envkit")
    )
    for path in list(found):
        text = load_text(path)
        found.update(data[name] for name in data if f'"{name}"' in text or f"'{name}'" in text)
    named = {path.relative_to(root).as_posix(): path for path in sorted(found)}
    return {**named, f"templates/{PAGE_TEMPLATE}": packaged_templates() / PAGE_TEMPLATE}


def _module_path(root: Path, name: str) -> Path | None:
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        note(candidate)
        if candidate.is_file():
            return candidate
    return None  # a name imported from a module (a function, a class): its module is already listed


def project_files(config, program: tuple[str, ...] = ()) -> tuple[list[str], bool]:
    """The project's files a command experiment's notebook carries (relative paths, sorted), and whether they
    are git's tracked list (False: every file of a folder that is not a git work tree); one line naming the
    files over FILE_CAP_BYTES, or (envkit.project.files) the largest when together they pass files_limit_mb."""
    from envkit.project.files import files_of

    files = files_of(config)
    files.require_program(program)  # a script not yet committed: one line, as `envkit run` says it
    kept = list(zip(files.paths, files.sizes, strict=True))
    over = sorted(((size, path) for path, size in kept if size > FILE_CAP_BYTES), reverse=True)
    if over:
        named = ", ".join(f"{path} ({size / 1e6:.1f} MB)" for size, path in over[:OVER_CAP_NAMED])
        more = f" and {len(over) - OVER_CAP_NAMED} more" if len(over) > OVER_CAP_NAMED else ""
        raise EnvkitError(
            f"{named}{more}: over the {FILE_CAP_BYTES / 1e6:.0f} MB a notebook embeds per file; a notebook carries "
            f"code, and data is downloaded in the notebook, never embedded: list it in .dockerignore (or untrack it) "
            f"and have the program fetch it into ENVKIT_DATA_DIR"
        )
    return [path for path, _ in kept], files.tracked

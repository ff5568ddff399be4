"""Tests are found by path: tests/<package>/test_<module>*.py tests envkit/<package>/<module>.py.

Not every module has a file of its own: one that serves others (a helper split off a larger module, a command's
module in envkit/cli, support's shared pieces) is tested through the modules and commands that use it, so every
module is either named by a test file or imported, through envkit's own imports, by one.

The folders mirror envkit's packages; the recipes' tests sit in tests/recipes/, suites that cross
packages (a real engine, Slurm, notebooks executed, the Makefile) in tests/integration/, and checks
of the repository as a whole (layers, docs) in tests/repo/. Helpers shared by tests are modules at
tests/ top level, never test files: a test file does not import another. A package's own fixtures are in its
conftest.py, the one other file its folder may hold.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from paths import REPO_ROOT, TESTS

from envkit import cli

TEST_IMPORT = re.compile(r"\b(?:from|import) test_\w+")
# Folders whose tests are not about one module, and what each holds.
CROSS_CUTTING = {
    "integration": "suites that run several packages together against real tools",
    "repo": "checks of the repository as a whole",
}


def package_modules(package: Path) -> set[str]:
    """What a test file in the package's folder may be named after: its modules and the package itself."""
    modules = {path.stem for path in package.glob("*.py") if path.stem != "__init__"}
    modules |= {path.parent.name for path in package.glob("*/__init__.py")}
    return modules | {package.name}


def allowed_folders() -> dict[str, set[str] | None]:
    """Each folder a test file may live in, with the module names its files must start with (None: free)."""
    folders: dict[str, set[str] | None] = {
        path.parent.name: package_modules(path.parent) for path in (REPO_ROOT / "envkit").glob("*/__init__.py")
    }
    folders["recipes"] = package_modules(REPO_ROOT / "recipes")
    folders.update(dict.fromkeys(CROSS_CUTTING))
    return folders


def all_test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def names_a_module(stem: str, modules: set[str]) -> bool:
    topic = stem.removeprefix("test_")
    return any(topic == module or topic.startswith(module + "_") for module in modules)


def test_every_test_file_is_in_a_package_folder_and_named_after_one_of_its_modules():
    folders = allowed_folders()
    misplaced = []
    for path in all_test_files():
        relative = path.relative_to(TESTS)
        if len(relative.parts) != 2 or relative.parts[0] not in folders:
            misplaced.append(f"{relative}: not in a folder named after a package of envkit, recipes or {CROSS_CUTTING}")
            continue
        modules = folders[relative.parts[0]]
        if modules is not None and not names_a_module(path.stem, modules):
            misplaced.append(f"{relative}: names no module of {relative.parts[0]} ({', '.join(sorted(modules))})")
    assert misplaced == []


def test_the_rule_tells_a_module_from_a_longer_name():
    assert names_a_module("test_build_context", {"build", "build_context"})
    assert names_a_module("test_lockfile_torch_index", {"lockfile"})
    assert not names_a_module("test_builder", {"build"})
    assert not names_a_module("test_hostile", {"host"})


def test_a_test_file_imports_no_other_test_file():
    # Read as text, so that an import in a subprocess's script counts too.
    importing = [
        f"{path.relative_to(TESTS)}: {found}"
        for path in all_test_files()
        for found in TEST_IMPORT.findall(path.read_text(encoding="utf-8"))
    ]
    assert importing == []


def test_helpers_at_the_top_are_not_test_files_and_folders_hold_no_strays():
    top = {path.name for path in TESTS.glob("*.py")}
    assert not {name for name in top if name.startswith("test_")}
    folders = set(allowed_folders())
    strays = [
        path.relative_to(TESTS).as_posix()
        for path in TESTS.glob("*/*.py")
        if path.parent.name in folders and not path.name.startswith("test_") and path.name != "conftest.py"
    ]
    assert strays == []


def envkit_imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of envkit (dotted names, among ``modules``) that a file imports."""
    package = path.relative_to(REPO_ROOT).parts[:-1]  # what `from .` names; `from ..` the one above
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            above = package[: len(package) + 1 - node.level] if node.level else ()
            base = ".".join(filter(None, [*above, node.module]))
            names += [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return {name for name in names if name in modules}


def named_module(test: Path) -> set[str]:
    """The module of envkit that tests/<package>/test_<module>*.py is named after (test_<package>*.py: the package)."""
    package = REPO_ROOT / "envkit" / test.parent.name
    if not (package / "__init__.py").is_file():
        return set()
    return {
        "envkit." + (package.name if module == package.name else f"{package.name}.{module}")
        for module in package_modules(package)
        if names_a_module(test.stem, {module})
    }


def untested_modules() -> list[str]:
    """The modules of envkit that no test file is named after or reaches through what it imports (envkit.cli
    imports its commands' modules by name, from cli.COMMANDS)."""
    paths = {
        ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__"): path
        for path in (REPO_ROOT / "envkit").rglob("*.py")
    }
    edges = {module: envkit_imports(path, set(paths)) for module, path in paths.items()}
    edges["envkit.cli"] |= {f"envkit.cli.{module}" for module in cli.COMMANDS.values()}
    # the templates' generated modules are read by envkit.render.template_cache from their package's index, never
    # imported (tests/render/test_template_cache.py regenerates each)
    shipped = "envkit.render.shipped_templates"
    edges[shipped] |= {module for module in paths if module.startswith(f"{shipped}.")}
    tests = all_test_files()
    reached = set().union(*map(named_module, tests))
    # envkit/__main__.py runs as `python -m envkit`, as the tests run envkit in a child process
    reached |= (
        {"envkit.__main__"} if any('"-m", "envkit"' in path.read_text(encoding="utf-8") for path in tests) else set()
    )
    reached |= set().union(*(envkit_imports(path, set(paths)) for path in tests))
    frontier = set(reached)
    while frontier:
        frontier = set().union(*(edges[module] for module in frontier)) - reached
        reached |= frontier
    return sorted(set(paths) - reached)


def test_every_module_is_named_by_a_test_file_or_reached_through_one():
    assert untested_modules() == []

"""Tests are found by path: tests/<package>/test_<module>*.py tests envkit/<package>/<module>.py.

The folders mirror envkit's packages; the recipes' tests sit in tests/recipes/, suites that cross
packages (a real engine, Slurm, notebooks executed, the Makefile) in tests/integration/, and checks
of the repository as a whole (layers, docs) in tests/repo/. Helpers shared by tests are modules at
tests/ top level, never test files: a test file does not import another. A package's own fixtures are in its
conftest.py, the one other file its folder may hold.
"""

from __future__ import annotations

import re
from pathlib import Path

from paths import REPO_ROOT, TESTS

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

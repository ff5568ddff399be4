"""Docs that match the code: every path and dotted name README.md, docs/*.md or a docstring cites exists,
docs/design.md's module table lists every module of envkit, and README's envkit.yaml is the repository's own.

What counts as a citation:
- a path from the repository root (``envkit/host/venv.py``, ``tests/golden/``, ``docker/<target>/``: up to the
  placeholder), or from envkit/ (``render/output.py``), a Python file named alone (``plans.py``), and any
  Markdown file with its folder (``docs/design.md``: a cited document that is not in the repository shows);
- a dotted name from envkit (``envkit.runs.report.build_report``), resolved by import then getattr;
- ``module.name`` in backquotes, where module is a module of envkit or the recipes (``inputs.lock_inputs``,
  ``harness.set_loader_epoch``): the name must be an attribute of a module of that name, or a field of the
  results JSON (``environment.image``).
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from paths import REPO_ROOT

# Paths that are not in this repository, and why they are cited.
ELSEWHERE = {
    "docs/notebooks/get_started_tpu.py": "TorchTPU's repository",
    "docs/notebooks/distributed_training_101.py": "TorchTPU's repository",
    "docs/kernels_metadata.md": "kaggle-cli's repository",
    "docker/cuda/pushed.json": "what envkit push writes, in a user's project",
    "envkit_notebook.py": "the name envkit/notebook/runtime.py takes inside a notebook",
    "envkit.mk": "the make include envkit init writes in a user's project (templates/init/envkit.mk)",
    "envkit/templates/": "where the wheel carries templates/ (setup.py copies it there)",
}
ELSEWHERE_NAMES = {name.rpartition("/")[2] for name in ELSEWHERE}
RESULTS_SCHEMA = REPO_ROOT / "envkit" / "data" / "results.schema.json"
CODE_FOLDERS = ("envkit", "recipes", "tests", "benchmarks", "scripts")
# The repository's own folders are those git tracks: results/, data/ and the venvs that `make demo` and `make venv`
# leave in a checkout are not the repository's, so a doc naming results/*.json names an output, not a path here.
TRACKED = subprocess.run(
    ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
).stdout.split("\0")
TOP_LEVEL = sorted({name.partition("/")[0] for name in TRACKED if "/" in name})
PACKAGES = sorted(path.parent.name for path in (REPO_ROOT / "envkit").glob("*/__init__.py"))
PATH = re.compile(rf"(?<![\w./~:-])((?:{'|'.join(map(re.escape, TOP_LEVEL))})/[\w./<>*{{}}-]*)")
ENVKIT_PATH = re.compile(rf"`((?:{'|'.join(PACKAGES)})/\w+\.py)`")
FILE_NAME = re.compile(r"`(\w+\.py)`")
MARKDOWN = re.compile(r"(?<![\w/.:-])((?:\.\./)?[\w.-]+(?:/[\w.-]+)*/[\w.-]+\.md)\b")
DOTTED = re.compile(r"(?<![\w./-])(envkit(?:\.\w+)+)")
MODULE_NAME = re.compile(r"`(?!envkit\.)(\w+)\.(?!(?:py|yaml|yml|json|md|lock|toml|txt|sh|ipynb)\b)(\w+)")


def python_files() -> list[Path]:
    return sorted(path for folder in CODE_FOLDERS for path in (REPO_ROOT / folder).rglob("*.py"))


def module_names() -> dict[str, list[str]]:
    """Stem -> the importable names of envkit's and the recipes' modules of that stem."""
    names: dict[str, list[str]] = {}
    for path in sorted((REPO_ROOT / "envkit").rglob("*.py")):
        dotted = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")
        names.setdefault(dotted.rpartition(".")[2], []).append(dotted)
    for path in sorted((REPO_ROOT / "recipes").rglob("*.py")):
        dotted = ".".join(path.relative_to(REPO_ROOT / "recipes").with_suffix("").parts).removesuffix(".__init__")
        names.setdefault(dotted.rpartition(".")[2], []).append(dotted)
    return names


def documents() -> Iterator[tuple[str, str]]:
    """(where, text) for README.md, docs/*.md and every docstring of the repository's Python."""
    for path in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]:
        yield path.relative_to(REPO_ROOT).as_posix(), path.read_text(encoding="utf-8")
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                docstring = ast.get_docstring(node, clean=False)
                if docstring:
                    yield f"{path.relative_to(REPO_ROOT).as_posix()}:{getattr(node, 'lineno', 1)}", docstring


def path_exists(cited: str) -> bool:
    cited = re.split(r"[<{]", cited.rstrip(".,:;)"))[0]
    if "*" in cited:
        return any(REPO_ROOT.glob(cited))
    return (REPO_ROOT / cited).exists()


def results_field(dotted: str) -> bool:
    """Whether ``dotted`` is a field of the results JSON (``environment.image``), as its schema declares it."""
    node = json.loads(RESULTS_SCHEMA.read_text(encoding="utf-8"))
    for key in dotted.split("."):
        node = node.get("properties", {}).get(key)
        if node is None:
            return False
    return True


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def broken_references(text: str, modules: dict[str, list[str]], files: set[str]) -> list[str]:
    broken = [m for m in PATH.findall(text) if m.rstrip(".,:;)") not in ELSEWHERE and not path_exists(m)]
    broken += [m for m in ENVKIT_PATH.findall(text) if not (REPO_ROOT / "envkit" / m).is_file()]
    broken += [m for m in FILE_NAME.findall(text) if m not in files and m not in ELSEWHERE_NAMES]
    broken += [m for m in MARKDOWN.findall(text) if m not in ELSEWHERE and not path_exists(m.removeprefix("../"))]
    for dotted in DOTTED.findall(text):
        dotted = dotted.rstrip(".")
        if not (
            dotted in ELSEWHERE_NAMES
            or (REPO_ROOT / dotted).exists()
            or (REPO_ROOT / "envkit" / "data" / dotted).exists()
            or resolves(dotted)
        ):
            broken.append(dotted)
    for module, name in MODULE_NAME.findall(text):
        cited = f"{module}.{name}"
        if module in modules and not any(resolves(f"{candidate}.{name}") for candidate in modules[module]):
            if not results_field(cited):
                broken.append(cited)
    return broken


def test_every_path_and_dotted_name_a_doc_or_docstring_cites_exists():
    modules = module_names()
    files = {path.name for path in python_files()}
    broken = [
        f"{where}: {reference}" for where, text in documents() for reference in broken_references(text, modules, files)
    ]
    assert broken == []


def test_a_folder_git_ignores_is_not_a_repository_path():
    # After `make demo` a checkout holds results/ (README names results/*.json and results/kaggle/, outputs that a
    # run writes); make venv leaves .venv*/ and .cache/. None is the repository's, so none is checked as a path.
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=REPO_ROOT,
        input="\n".join(f"{name}/" for name in [*TOP_LEVEL, "results", "data", ".venv-xla", ".cache"]),
        capture_output=True,
        text=True,
    ).stdout.split()
    assert {"results/", "data/", ".venv-xla/", ".cache/"} <= set(ignored)
    assert [name for name in TOP_LEVEL if f"{name}/" in ignored] == []
    assert broken_references("`results/kaggle/` and results/*.json", module_names(), set()) == []


@pytest.mark.parametrize(
    "text",
    [
        "see `envkit/render/gone.py`",
        "`render/gone.py` renders",
        "`gone.py` renders",
        "envkit.render.output.no_such_function",
        "envkit.no_such_module",
        "`lockfile.no_such_function`",
        "`environment.no_such_field`",
        "the tables follow shared/reference/experiments.md",
        "templates/gone/<target>/",
    ],
)
def test_a_reference_to_something_missing_is_caught(text):
    files = {path.name for path in python_files()}
    assert broken_references(text, module_names(), files) != []


def test_references_to_what_exists_pass():
    text = (
        "`envkit/render/output.py`, `render/output.py`, `plans.py`, envkit.runs.report, `inputs.lock_inputs`, "
        "`harness.set_loader_epoch`, `environment.image_id`, docker/<target>/, tests/golden/, envkit.yaml"
    )
    files = {path.name for path in python_files()}
    assert broken_references(text, module_names(), files) == []


def test_the_design_module_table_lists_every_module_of_each_package():
    """A launch engine's module is the registry's (envkit.launch.engines.REGISTRY): the table says so once, and a new
    engine is its module and one registry line."""
    from envkit.launch.engines import REGISTRY

    engine_modules = {engine.plan.__module__ for engine in REGISTRY.values()}
    design = (REPO_ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `envkit/(\w+)/` \| (.*?) \|", design, re.MULTILINE))
    assert sorted(rows) == PACKAGES
    assert "one module per engine of the registry" in rows["launch"]
    unlisted = [
        f"envkit/{package}/{path.name}"
        for package in PACKAGES
        for path in sorted((REPO_ROOT / "envkit" / package).glob("*.py"))
        if path.stem != "__init__"
        and f"`{path.stem}`" not in rows[package]
        and f"envkit.{package}.{path.stem}" not in engine_modules
    ]
    assert unlisted == []


def test_the_readme_envkit_yaml_snippet_is_the_repository_s_own_targets():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    (snippet,) = re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL)
    config = yaml.safe_load((REPO_ROOT / "envkit.yaml").read_text(encoding="utf-8"))
    shown = yaml.safe_load(snippet)["targets"]
    assert shown == {name: config["targets"][name] for name in shown}

"""The house's size rules, measured on the code: no function in envkit/ over 80 lines, no module over 500, no line
of envkit/ or recipes/ over 120 characters (the formatter keeps code within it; messages, comments and docstrings
are wrapped by hand).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from paths import REPO_ROOT

FUNCTION_LINES = 80
MODULE_LINES = 500
LINE_CHARACTERS = 120
# Generated, not written: scripts/generate_validators.py writes them, tests/project/test_validators.py and
# tests/render/test_template_cache.py check them (the templates' modules are Jinja's code, one function a template).
GENERATED = {"envkit/project/validators.py", "envkit/project/detectors.py"}
GENERATED_FOLDERS = ("envkit/render/shipped_templates",)


def python_files(*folders: str, root: Path = REPO_ROOT) -> list[Path]:
    paths = (path for folder in folders for path in (root / folder).rglob("*.py"))
    return sorted(path for path in paths if not generated(path.relative_to(root).as_posix()))


def generated(where: str) -> bool:
    return where in GENERATED or where.startswith(tuple(f"{folder}/" for folder in GENERATED_FOLDERS))


def oversized(root: Path = REPO_ROOT) -> dict[str, str]:
    """What is over a limit -> by how much."""
    found = {}
    for path in python_files("envkit", root=root):
        where = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MODULE_LINES:
            found[f"{where}: a module over {MODULE_LINES} lines"] = f"{text.count(chr(10))} lines"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > FUNCTION_LINES:
                    found[f"{where}: {node.name}, a function over {FUNCTION_LINES} lines"] = f"{length} lines"
    for path in python_files("envkit", "recipes", root=root):
        where = path.relative_to(root).as_posix()
        lines = path.read_text(encoding="utf-8").splitlines()
        long = [f"{number}" for number, line in enumerate(lines, start=1) if len(line) > LINE_CHARACTERS]
        if long:
            found[f"{where}: lines over {LINE_CHARACTERS} characters"] = f"lines {', '.join(long)}"
    return found


def test_no_function_module_or_line_is_over_its_limit():
    assert python_files("envkit") and python_files("recipes")
    assert oversized() == {}


@pytest.mark.parametrize(
    "source, problem",
    [
        (
            "def f():\n" + "    x = 1\n" * 80 + "    return x\n",
            {"envkit/big.py: f, a function over 80 lines": "82 lines"},
        ),
        ("x = 1\n" * 501, {"envkit/big.py: a module over 500 lines": "501 lines"}),
        ("x = '" + "a" * 120 + "'\n", {"envkit/big.py: lines over 120 characters": "lines 1"}),
    ],
)
def test_each_limit_is_caught(tmp_path, source, problem):
    (tmp_path / "envkit").mkdir()
    (tmp_path / "envkit" / "big.py").write_text(source)
    assert oversized(tmp_path) == problem

"""A test that asserts only inside a loop over the repository's data passes when that data is empty: it must
first assert that there is something to check (issue 31 §5). Loops over a literal (a tuple of cases, range(2))
cannot be empty, so they need no such assert."""

from __future__ import annotations

import ast

from paths import REPO_ROOT


def _literal(iterable: ast.expr) -> bool:
    if isinstance(iterable, (ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Constant)):
        return True
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name):
        if iterable.func.id == "range":
            return True
        if iterable.func.id in ("enumerate", "zip", "sorted", "reversed") and iterable.args:
            return all(_literal(argument) for argument in iterable.args)
    return False


def _checks(node: ast.AST) -> list[ast.AST]:
    """The assert statements and pytest.raises blocks directly in ``node``'s body, not in nested functions."""
    found = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.For, ast.While)):
            continue
        if isinstance(child, ast.Assert):
            found.append(child)
        elif isinstance(child, ast.With) and any(
            isinstance(item.context_expr, ast.Call) and getattr(item.context_expr.func, "attr", "") == "raises"
            for item in child.items
        ):
            found.append(child)
        found.extend(_checks(child))
    return found


def _loops_over_data(node: ast.AST) -> bool:
    return any(isinstance(child, ast.For) and not _literal(child.iter) for child in ast.walk(node))


def unguarded_tests() -> list[str]:
    offenders = []
    for path in sorted((REPO_ROOT / "tests").rglob("test_*.py")):
        for function in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(function, ast.FunctionDef) or not function.name.startswith("test"):
                continue
            asserts_anywhere = any(isinstance(node, ast.Assert) for node in ast.walk(function))
            if asserts_anywhere and not _checks(function) and _loops_over_data(function):
                offenders.append(f"{path.relative_to(REPO_ROOT)}:{function.lineno} {function.name}")
    return offenders


def test_every_loop_over_data_is_first_checked_to_be_non_empty():
    assert unguarded_tests() == []


def test_the_check_finds_a_test_that_asserts_only_in_its_loop(tmp_path, monkeypatch):
    source = "def test_x(table):\n    for row in table:\n        assert row\n"
    guarded = "def test_y(table):\n    assert table\n    for row in table:\n        assert row\n"
    cases = "def test_z():\n    for case in (1, 2):\n        assert case\n"
    tree = ast.parse(source + guarded + cases)
    verdicts = {
        function.name: not _checks(function) and _loops_over_data(function)
        for function in tree.body
        if isinstance(function, ast.FunctionDef)
    }
    assert verdicts == {"test_x": True, "test_y": False, "test_z": False}

"""The run wrapper's records module (envkit.support.provenance_records) owns the results folder's name."""

from __future__ import annotations

import ast

from paths import REPO_ROOT

from envkit.support.provenance_records import RESULTS_FOLDER


def _named(text: str) -> bool:
    return text == RESULTS_FOLDER or text.startswith(f"{RESULTS_FOLDER}/") or text.startswith(f"./{RESULTS_FOLDER}")


def test_the_results_folder_s_name_is_written_once():
    """envkit's modules, templates and make files read RESULTS_FOLDER (templates get it as data, the Makefile reads
    the line with sed); the recipes keep a copy (tests/recipes/test_harness.py compares it)."""
    home = REPO_ROOT / "envkit" / "support" / "provenance_records.py"
    found = [
        f"{path.relative_to(REPO_ROOT)}:{node.lineno}"
        for path in sorted((REPO_ROOT / "envkit").rglob("*.py"))
        if path != home
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _named(node.value)
    ]
    texts = ["templates/run.sh.j2", "templates/init/envkit.mk", "Makefile"]
    found += [name for name in texts if f"./{RESULTS_FOLDER}" in (REPO_ROOT / name).read_text()]
    found += [name for name in texts if f"?= {RESULTS_FOLDER}\n" in (REPO_ROOT / name).read_text()]
    found += [name for name in texts if f"/{RESULTS_FOLDER}\n" in (REPO_ROOT / name).read_text()]
    assert found == []

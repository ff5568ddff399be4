"""envkit/ has no import cycle and no import that runs back up its layers.

Both checks read the real import graph with grimp (import-linter's graph library), which
counts imports inside functions too: the cycle issue 18 found was one such import.
"""

from __future__ import annotations

import pytest
from paths import REPO_ROOT

grimp = pytest.importorskip("grimp", reason="pip install import-linter (requirements/dev.in)")

PYPROJECT = REPO_ROOT / "pyproject.toml"


def cycles(graph) -> list[list[str]]:
    """Every import edge a -> b that b leads back to, as the chain b ... a."""
    found = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back:
                found.append([importer, *back])
    return found


def test_envkit_has_no_import_cycle():
    assert cycles(grimp.build_graph("envkit")) == []


def test_the_cycle_check_finds_a_function_level_cycle(tmp_path, monkeypatch):
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from cyclic import b\n")
    (package / "b.py").write_text("def later():\n    from cyclic import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles(grimp.build_graph("cyclic")) == [
        ["cyclic.a", "cyclic.b", "cyclic.a"],
        ["cyclic.b", "cyclic.a", "cyclic.b"],
    ]


def test_packages_import_only_the_layers_below_them(capsys):
    from importlinter import cli

    exit_code = cli.lint_imports(config_filename=str(PYPROJECT))
    assert exit_code == 0, capsys.readouterr().out


def test_every_layer_named_in_the_contract_is_a_package_of_envkit():
    import tomllib

    layers = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"][0]["layers"]
    packages = {path.parent.name for path in (PYPROJECT.parent / "envkit").glob("*/__init__.py")}
    assert {layer.removeprefix("envkit.") for layer in layers} == packages

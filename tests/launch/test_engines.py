"""The engine registry (envkit.launch.engines): every engine a module, its options the CLI's flags, and a new\nengine its module plus one registry line (the toy engine)."""

from __future__ import annotations

import ast

import pytest
from paths import REPO_ROOT

from envkit.cli import main
from envkit.launch import engines


def test_every_engine_is_registered_by_its_name():
    assert all(name == engine.name for name, engine in engines.REGISTRY.items())


def test_every_engine_setting_of_the_parser_is_an_engine_option():
    import argparse

    from envkit.cli import launch as cli_launch

    parser = argparse.ArgumentParser()
    cli_launch.register(parser.add_subparsers())
    launch = parser._subparsers._group_actions[0].choices["launch"]
    group = next(g for g in launch._action_groups if g.title == "engine settings")
    settings = {action.dest for action in group._group_actions}
    assert settings == {option.name for engine in engines.REGISTRY.values() for option in engine.options}


TOY_ENGINE = '''"""A toy engine: the command each node would run, in a colour."""

import re

from envkit.errors import EnvkitError
from envkit.launch.plan import LaunchPlan
from envkit.launch.spec import Engine, Option


def check(job):
    if job.options.colour == "red" and job.nodes > 1:
        raise EnvkitError("--colour red runs on one node")


def plan(job, output):
    argv = ("toyrun", "--nodes", str(job.nodes), "--colour", job.options.colour, *job.command())
    return LaunchPlan(files=(), commands=(argv,), results="in the toy's box")


COLOUR = Option("colour", "toy: a colour", default="blue", valid=("lowercase letters", re.compile("^[a-z]+$")))
ENGINE = Engine(name="toy", accelerators=("none",), options=(COLOUR,), plan=plan, check=check)
'''


def test_a_new_engine_is_one_module_and_one_registry_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "toy_engines").mkdir()
    (tmp_path / "toy_engines" / "__init__.py").write_text("")
    (tmp_path / "toy_engines" / "toy.py").write_text(TOY_ENGINE)
    monkeypatch.syspath_prepend(tmp_path)
    from toy_engines import toy

    monkeypatch.setitem(engines.REGISTRY, "toy", toy.ENGINE)  # the registry line
    config = ["--config", str(REPO_ROOT / "envkit.yaml")]

    def launch(*argv: str) -> tuple[int, str, str]:
        code = main(["launch", "cpu-ddp-cifar", "--on", "toy", "--dry-run", *config, *argv])
        return (code, *capsys.readouterr())

    code, out, _ = launch("--nodes", "2", "--colour", "green")
    assert code == 0 and out.startswith("# --- submit\ntoyrun --nodes 2 --colour green python recipes/cifar.py ")
    assert launch("--colour", "Green")[2] == "envkit: error: --colour 'Green' is not valid: give lowercase letters\n"
    assert launch("--nodes", "2", "--colour", "red")[2] == "envkit: error: --colour red runs on one node\n"
    code, _, err = main(["launch", "gpu-ddp-cifar", "--on", "toy", "--dry-run", *config]), *capsys.readouterr()
    assert (code, err) == (
        2,
        "envkit: error: --on toy runs cpu experiments, and gpu-ddp-cifar is a cuda experiment; "
        "engines for it: hosts, slurm, pytorchjob, jobset, skypilot, kaggle\n",
    )
    code, _, err = main(["launch", "cpu-ddp-cifar", "--on", "tpu-pod", "--dry-run", *config]), *capsys.readouterr()
    assert code == 2 and err.endswith("engines for it: hosts, slurm, pytorchjob, jobset, skypilot, toy\n")
    help_text = main_help(capsys)
    assert "--colour COLOUR" in help_text and "toy: a colour" in help_text


def main_help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["launch", "--help"])
    return capsys.readouterr().out


LAUNCH = REPO_ROOT / "envkit" / "launch"


def _imported_launch_modules(path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "envkit.launch":
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("envkit.launch."):
            found.add(node.module.rsplit(".", 1)[1])
    return found


def test_no_engine_imports_another():
    """What two engines share lives in a module of its own (run_sh, yaml_text), so an engine is one file."""
    modules = {engine.plan.__module__.rsplit(".", 1)[1] for engine in engines.REGISTRY.values()}
    assert modules == {"hosts", "slurm", "kubernetes", "tpu_pod", "skypilot", "kaggle"}
    crossing = {name: _imported_launch_modules(LAUNCH / f"{name}.py") & modules for name in sorted(modules)}
    assert crossing == {name: set() for name in sorted(modules)}


def test_no_launch_module_names_a_target_kind():
    """A kind's devices are data (kinds.yaml's launch): no module of envkit/launch tests a kind by its name."""
    from envkit.project.kinds import names

    kinds = set(names())
    assert kinds
    named = [
        f"{path.name}:{node.lineno}"
        for path in sorted(LAUNCH.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Compare)
        and any(
            isinstance(constant, ast.Constant) and constant.value in kinds
            for side in (node.left, *node.comparators)
            for constant in ast.walk(side)
        )
    ]
    assert named == []


def test_an_engine_runs_the_kinds_whose_accelerator_it_asks_for():
    runs = {name: engine.kinds for name, engine in engines.REGISTRY.items()}
    assert runs == {
        "hosts": ("cpu", "cuda"),
        "slurm": ("cpu", "cuda"),
        "pytorchjob": ("cpu", "cuda"),
        "jobset": ("cpu", "cuda", "tpu-vm"),
        "tpu-pod": ("tpu-vm",),
        "skypilot": ("cpu", "cuda", "tpu-vm"),
        "kaggle": ("cuda", "tpu-vm"),  # its accelerators' kinds (envkit/data/notebook_platforms.yaml)
    }


def test_launch_modules_and_functions_stay_small():
    """Issue 31's figures for the launch code: modules of at most 500 lines, functions of at most 80."""
    paths = [*sorted(LAUNCH.glob("*.py")), REPO_ROOT / "envkit" / "cli" / "launch.py"]
    assert len(paths) > 10
    long_modules = [path.name for path in paths if len(path.read_text().splitlines()) > 500]
    long_functions = [
        f"{path.name}:{node.name}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 80
    ]
    assert (long_modules, long_functions) == ([], [])

"""The engine registry (envkit.launch.engines): every engine a module, its options the CLI's flags, and a new\nengine its module plus one registry line (the toy engine)."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from paths import REPO_ROOT

from envkit.cli import main
from envkit.errors import EnvkitError
from envkit.launch import engines, hosts, images, kaggle, kubernetes, slurm
from envkit.launch.spec import Engine, Option


def test_every_engine_is_registered_by_its_name():
    assert all(name == engine.name for name, engine in engines.REGISTRY.items())


def launch_parser():
    import argparse

    from envkit.cli import launch as cli_launch

    parser = argparse.ArgumentParser()
    cli_launch.register(parser.add_subparsers())
    return parser._subparsers._group_actions[0].choices["launch"]


def test_each_engine_s_options_are_its_group_of_flags():
    groups = {group.title: group for group in launch_parser()._action_groups}
    for name, engine in engines.REGISTRY.items():
        flags = {action.dest for action in groups[f"--on {name}"]._group_actions}
        shared = groups[f"--on {name}"].description or ""
        assert flags | {option.name for option in engine.options if option.flag in shared} == {
            option.name for option in engine.options
        }
    assert groups["--on tpu-pod"].description == "also --image-tarball"  # slurm's group shows it


def engine_with(*options: Option, name: str = "toy") -> Engine:
    return Engine(name=name, accelerators=("none",), options=options, plan=lambda job, output: None)


def test_two_engines_declaring_one_option_name_are_refused_at_registration():
    with pytest.raises(EnvkitError) as refused:
        engines.registry(slurm.ENGINE, engine_with(Option("partition", "toy: a partition number", type=int)))
    assert str(refused.value) == (
        "launch engines slurm and toy both declare --partition: an engine's options are its own, rename one"
    )
    with pytest.raises(EnvkitError, match="two launch engines are named 'slurm'"):
        engines.registry(slurm.ENGINE, engine_with(name="slurm"))
    # One declaration listed by two engines is one flag of both.
    assert list(engines.registry(kubernetes.PYTORCHJOB, kubernetes.JOBSET)) == ["pytorchjob", "jobset"]


def test_an_engine_option_named_like_an_option_of_every_engine_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(engines, "REGISTRY", engines.registry(hosts.ENGINE, engine_with(Option("nodes", "toy: nodes"))))
    assert main(["launch", "cpu-ddp-cifar", "--on", "toy", "--dry-run"]) == 2
    assert capsys.readouterr().err == (
        "envkit: error: launch engine toy declares --nodes, an option of every engine: rename it\n"
    )


def test_another_engine_s_option_is_refused(capsys):
    config = ["--config", str(REPO_ROOT / "envkit.yaml")]
    assert main(["launch", "cpu-ddp-cifar", "--on", "hosts", "--partition", "gpu", "--dry-run", *config]) == 2
    assert capsys.readouterr().err == (
        "envkit: error: --partition is an option of --on slurm, not of --on hosts (its own: --hosts)\n"
    )
    assert main(["launch", "cpu-ddp-cifar", "--on", "jobset", "--image-tarball", "x.tar.gz", "--dry-run", *config]) == 2
    assert "--image-tarball is an option of --on slurm, tpu-pod, not of --on jobset" in capsys.readouterr().err


def test_launch_runs_without_the_engines_that_declare_the_tarball(monkeypatch, capsys):
    """What every engine takes is read from launch's own options; an engine's, from its settings alone."""
    kept = [engine for engine in engines.REGISTRY.values() if images.TARBALL not in engine.options]
    monkeypatch.setattr(engines, "REGISTRY", engines.registry(*kept))
    code = main(["launch", "cpu-ddp-cifar", "--on", "hosts", "--dry-run", "--config", str(REPO_ROOT / "envkit.yaml")])
    assert (code, capsys.readouterr().err) == (0, "")


def test_an_engine_is_the_fields_every_engine_has():
    """What only Kaggle needs (its target, its job names, its kinds, no image) lives in its engine (a subclass)."""
    assert [field.name for field in dataclasses.fields(Engine)] == [
        "name",
        "accelerators",
        "options",
        "plan",
        "check",
        "stop",
        "job_name",
        "reserved_env",
    ]
    assert (kaggle.ENGINE.runs_image, kaggle.ENGINE.one_run, kaggle.ENGINE.default_name("x")) == (
        False,
        False,
        "envkit-x",
    )


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

    monkeypatch.setattr(engines, "REGISTRY", engines.registry(*engines.REGISTRY.values(), toy.ENGINE))
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
        f"engines for it: {engines_for('cuda')}\n",
    )
    code, _, err = main(["launch", "cpu-ddp-cifar", "--on", "tpu-pod", "--dry-run", *config]), *capsys.readouterr()
    assert code == 2 and err.endswith(f"engines for it: {engines_for('cpu')}\n") and engines_for("cpu").endswith("toy")
    help_text = main_help(capsys)
    assert "--colour COLOUR" in help_text and "toy: a colour" in help_text


def engines_for(kind: str) -> str:
    return ", ".join(name for name, engine in engines.REGISTRY.items() if kind in engine.kinds)


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
    assert {"hosts", "kubernetes", "kaggle"} <= modules
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
    """Read from kinds.yaml here (each kind's launch accelerator); Kaggle's kinds are its accelerators' own."""
    declared = yaml.safe_load((REPO_ROOT / "envkit" / "data" / "kinds.yaml").read_text())["kinds"]
    platforms = yaml.safe_load((REPO_ROOT / "envkit" / "data" / "notebook_platforms.yaml").read_text())
    kaggle_kinds = {accelerator["kind"] for accelerator in platforms["platforms"]["kaggle"]["accelerators"].values()}
    runs = {name: engine.kinds for name, engine in engines.REGISTRY.items()}
    assert runs == {
        name: tuple(
            kind
            for kind, spec in declared.items()
            if (kind in kaggle_kinds if name == "kaggle" else spec["launch"]["accelerator"] in engine.accelerators)
        )
        for name, engine in engines.REGISTRY.items()
    }
    assert (runs["tpu-pod"], runs["jobset"], runs["kaggle"]) == (
        ("tpu-vm",),
        ("cpu", "cuda", "tpu-vm"),
        ("cuda", "tpu-vm"),
    )


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


NEW_ENGINE = '''"""A new engine: the command each node runs, for a box."""

from envkit.launch.plan import LaunchPlan
from envkit.launch.spec import Engine, Option


def plan(job, output):
    argv = ("boxrun", "--shelf", job.options.shelf, *job.command())
    return LaunchPlan(files=(), commands=(argv,), results="in the box")


SHELF = Option("shelf", "box: the shelf it runs on", default="top")
ENGINE = Engine(name="box", accelerators=("none", "gpus"), options=(SHELF,), plan=plan)
'''
# What CI runs for a new engine: the launch tests and the docs' tests (design.md's table, docs/cli.md). The docs'
# check of every cited name imports the recipes' modules, so it runs where torch does (not in CI's torch-free venv,
# which runs the launch tests; the main suite runs this test again with torch).
CI_TESTS = (
    "tests/launch",
    "tests/cli/test_cli_reference.py",
    *(("tests/repo/test_docs.py",) if importlib.util.find_spec("torch") else ()),
)


def _git(copy, *argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=copy, capture_output=True, text=True, check=True).stdout


def _copy_repository(copy) -> None:
    """The repository's files as a checkout has them (tracked, and new ones not ignored), in a git repository."""
    listed = _git(REPO_ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, listed):
        source = REPO_ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    _git(copy, "init", "-q")
    _git(copy, "add", "-A")
    # ../shared beside the checkout (the published CRDs the Kubernetes tests check against), as CI lays it
    shared = REPO_ROOT.parent / "shared"
    if shared.is_dir():
        (copy.parent / "shared").symlink_to(shared)


def test_a_new_engine_passes_ci_with_its_module_and_one_registry_line(tmp_path):
    """The box engine is added as a user would, and the launch and docs tests pass with it: 2 files touched."""
    copy = tmp_path / "repository"
    _copy_repository(copy)
    (copy / "envkit" / "launch" / "box.py").write_text(NEW_ENGINE)
    registry = copy / "envkit" / "launch" / "engines.py"
    text = registry.read_text()
    text = text.replace("from envkit.launch import hosts,", "from envkit.launch import box, hosts,")
    registry.write_text(text.replace("    kaggle.ENGINE,\n", "    kaggle.ENGINE,\n    box.ENGINE,\n"))
    touched = _git(copy, "diff", "--name-only") + _git(copy, "ls-files", "--others", "--exclude-standard")
    assert touched.splitlines() == ["envkit/launch/engines.py", "envkit/launch/box.py"]
    assert _git(copy, "diff", "--numstat").split()[:2] == ["2", "1"]  # its name in the import, its registry line
    _git(copy, "add", "-A")
    env = {**os.environ, "PYTHONPATH": str(copy)}
    launch = [sys.executable, "-m", "envkit", "launch", "cpu-ddp-cifar", "--on", "box", "--dry-run"]
    ran = subprocess.run(launch, cwd=copy, capture_output=True, text=True, env=env)
    assert ran.stdout.startswith("# --- submit\nboxrun --shelf top python recipes/cifar.py "), ran.stderr
    this = f"tests/launch/test_engines.py::{test_a_new_engine_passes_ci_with_its_module_and_one_registry_line.__name__}"
    pytest_argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *CI_TESTS, "--deselect", this]
    done = subprocess.run(pytest_argv, cwd=copy, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout[-3000:]

"""envkit.cli.COMMANDS names every command's module, and a command loads only its own."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO_ROOT

from envkit.cli import COMMANDS


def registered(module: str) -> set[str]:
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    importlib.import_module(f"envkit.cli.{module}").register(subparsers)
    return set(subparsers.choices)


def test_the_table_and_the_modules_agree_both_ways():
    modules = set(COMMANDS.values())
    by_module = {module: registered(module) for module in modules}
    assert {command: module for module, commands in by_module.items() for command in commands} == COMMANDS
    every_cli_module = {path.stem for path in (REPO_ROOT / "envkit" / "cli").glob("*.py")} - {"__init__", "options"}
    assert every_cli_module == modules


def test_render_loads_only_the_render_commands(tmp_path):
    # An image target alone: --output is its folder, where notebooks would go to the checkout's notebooks/.
    probe = (
        "import json, sys; from envkit.cli import main;"
        f"code = main(['render', '--target', 'cpu', '--config', {str(REPO_ROOT / 'envkit.yaml')!r}, '--output', {str(tmp_path)!r}]);"
        "print(json.dumps([code, sorted(m for m in sys.modules if m.startswith('envkit.cli.'))]))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    assert json.loads(done.stdout.splitlines()[-1]) == [0, ["envkit.cli.options", "envkit.cli.render"]]


def test_a_run_here_imports_no_host_check_image_context_or_run_wrapper(tmp_path):
    """Issue 42 goal 2: `envkit experiment NAME --python PY` imported envkit.host.doctor (its GPU parser, the
    accelerator check's probes: about 50 ms) for a CPU experiment that needs none of it, the image's build context
    (to check --build-arg values it was not given) and the run wrapper, which runs in its own process; and
    dataclasses, with inspect, ast and tokenize (about 8 ms): the config's records and the run plans are NamedTuples;
    and decimal (about 1.5 ms), for the generated validators' number checks, which no YAML or JSON value needs."""
    config = str(REPO_ROOT / "envkit.yaml")
    probe = (
        "import json, sys; from envkit.cli import main;"
        f"code = main(['experiment', 'cpu-mnist', '--config', {config!r}, '--python', sys.executable, '--dry-run']);"
        "unused = ('envkit.host.doctor', 'envkit.image.build_context', 'envkit.support.provenance', 'dataclasses',"
        " 'inspect', 'decimal');"
        "print(json.dumps([code, sorted(set(unused) & set(sys.modules))]))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert json.loads(done.stdout.splitlines()[-1]) == [0, []]


def test_help_and_an_unknown_command_still_list_every_command():
    done = subprocess.run([sys.executable, "-m", "envkit", "nope"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    # The same words on every Python (3.13.5's argparse stopped quoting the choices; envkit never quotes them).
    assert f"invalid choice: 'nope' (choose from {', '.join(COMMANDS)})" in done.stderr


# A command line that reaches each dry-run command's handler (positionals it needs, nothing more).
DRY_RUN_LINES = {
    "compare": ["compare"],
    "demo": ["demo"],
    "experiment": ["experiment", "cpu-mnist"],
    "launch": ["launch", "cpu-mnist", "--on", "slurm"],
    "prune": ["prune", "cpu"],
    "reproduce": ["reproduce", "results"],
    "run": ["run", "cpu", "mnist"],
}


def test_dry_run_is_the_commands_own_before_or_after_its_name():
    from envkit.cli import build_parser, dry_run_commands, parse

    assert dry_run_commands(build_parser()) == sorted(DRY_RUN_LINES)
    for command, line in DRY_RUN_LINES.items():
        for argv in (["--dry-run", *line], [*line, "--dry-run"], [line[0], "--dry-run", *line[1:]]):
            args = parse(
                build_parser(command), [*argv, "--", "--epochs", "1"] if command in ("run", "launch") else argv
            )
            assert args.dry_run is True, argv


def envkit(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """envkit in ``cwd`` on this repository's config, with no Docker engine answering."""
    env = {**os.environ, "DOCKER_HOST": f"unix://{cwd}/no-engine.sock", "ENVKIT_CACHE_DIR": str(cwd.parent / "cache")}
    end = argv.index("--") if "--" in argv else len(argv)
    argv = (*argv[:end], "--config", str(REPO_ROOT / "envkit.yaml"), *argv[end:])
    return subprocess.run([sys.executable, "-m", "envkit", *argv], capture_output=True, text=True, cwd=cwd, env=env)


@pytest.mark.parametrize(
    "argv",
    [
        ["--dry-run", "experiment", "cpu-mnist"],
        ["experiment", "cpu-mnist", "--dry-run"],
        ["--dry-run", "run", "cpu", "mnist"],
        ["run", "cpu", "mnist", "--dry-run", "--", "--epochs", "1"],
    ],
)
def test_a_dry_run_prints_the_plan_and_runs_nothing_without_an_engine(argv, tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    done = envkit(*argv, cwd=cwd)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "docker/cpu/run.sh python recipes/mnist.py" in done.stdout
    assert list(cwd.iterdir()) == []  # no results or data directory made


@pytest.mark.parametrize("argv", [["--dry-run", "render", "--all"], ["lock", "--all", "--dry-run"]])
def test_a_command_without_a_dry_run_refuses_it_naming_those_that_have_one(argv, tmp_path):
    done = envkit(*argv, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "'--'" not in done.stderr, done.stderr
    assert f"{argv[1] if argv[0] == '--dry-run' else argv[0]} has no --dry-run" in done.stderr
    assert "compare, demo, experiment, launch, prune, reproduce, run" in done.stderr


def test_readme_names_exactly_the_commands_that_take_dry_run():
    from envkit.cli import build_parser, dry_run_commands

    section = (REPO_ROOT / "README.md").read_text().split("### Dry runs: one rule", 1)[1].split("\n#", 1)[0]
    claim = " ".join(section.split()).split("`--dry-run` belongs to the commands that build, push or run something: ")[
        1
    ]
    named = re.findall(r"`([a-z]+)`", claim.split(" take it anywhere")[0])
    assert sorted(named) == dry_run_commands(build_parser())

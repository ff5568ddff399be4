"""envkit.cli.COMMANDS names every command's module, and a command loads only its own."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

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
    probe = (
        "import json, sys; from envkit.cli import main;"
        f"code = main(['render', '--all', '--config', {str(REPO_ROOT / 'envkit.yaml')!r}, '--output', {str(tmp_path)!r}]);"
        "print(json.dumps([code, sorted(m for m in sys.modules if m.startswith('envkit.cli.'))]))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    assert json.loads(done.stdout.splitlines()[-1]) == [0, ["envkit.cli.options", "envkit.cli.render"]]


def test_help_and_an_unknown_command_still_list_every_command():
    done = subprocess.run([sys.executable, "-m", "envkit", "nope"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert all(f"'{command}'" in done.stderr for command in COMMANDS)

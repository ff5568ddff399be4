"""The CLI in a core-only install (`pip install .` without extras), and its one style of handler and --config.

The fast tests hide the optional packages from a subprocess with an import blocker;
the slow one installs the project into a fresh virtualenv with no extras.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest
from paths import REPO_ROOT

from envkit import DISTRIBUTION
from envkit.cli import build_parser
from envkit.project import DEFAULT_CONFIG

# What the report extra and the recipes bring, none of it in a core-only install; and the Docker SDK, a core
# dependency, hidden too: an environment without it gets one line naming how to install it. requests stays: the
# SDK brings it, and so does detect-secrets, a core dependency whose detectors import it.
OPTIONAL = ("docker", "matplotlib", "numpy", "torch", "torchvision", "torch_xla", "tqdm")
SDK_LINE = "envkit: error: the Docker SDK for Python is missing: pip install 'envkit-hw[docker]' (or run 'make venv')\n"
BLOCKER = f"""
import sys
from importlib.abc import MetaPathFinder
class Blocker(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {OPTIONAL!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Blocker())
from envkit.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def core_only(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER, *args], cwd=cwd, capture_output=True, text=True)


def subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_help_of_every_command_works_without_the_extras(repo_root):
    done = core_only("--help", cwd=repo_root)
    assert done.returncode == 0 and "render" in done.stdout, done.stderr
    for name in subcommands():
        done = core_only(name, "--help", cwd=repo_root)
        assert done.returncode == 0 and done.stdout.startswith(f"usage: envkit {name}"), (name, done.stderr)


def test_render_works_without_the_extras(repo_root):
    done = core_only("render", "--all", "--check", cwd=repo_root)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "command", [["build", "cpu"], ["save", "cpu"], ["push", "cpu", "--registry", "localhost:5000"], ["prune", "cpu"]]
)
def test_engine_commands_without_the_sdk_are_one_line_naming_the_extra(repo_root, command):
    done = core_only(*command, cwd=repo_root)
    assert (done.returncode, done.stderr) == (2, SDK_LINE)


def test_doctor_without_the_sdk_names_the_extra(repo_root):
    done = core_only("doctor", cwd=repo_root)
    assert done.returncode == 0 and "pip install 'envkit-hw[docker]'" in done.stdout, done.stderr


def test_every_handler_is_cmd_and_its_command_name():
    parsers = subcommands()
    assert parsers, "the parser has no subcommands"
    for name, parser in parsers.items():
        assert parser.get_default("func").__name__ == f"cmd_{name}"


def test_config_is_one_option_wherever_it_appears():
    options = {
        name: next((a for a in parser._actions if "--config" in a.option_strings), None)
        for name, parser in subcommands().items()
    }
    with_config = {name for name, option in options.items() if option is not None}
    assert with_config == {
        "targets",
        "render",
        "build",
        "run",
        "push",
        "save",
        "prune",
        "doctor",
        "experiment",
        "report",  # its experiments sections are the project's
        "compare",
        "demo",
        "launch",
        "lock",
        "venv",
        "verify",
        "diff",
        "notebook",
        "reproduce",  # the clone its project is in, and the experiment's tolerances
    }
    assert {(options[n].default, options[n].metavar, options[n].help, options[n].type) for n in with_config} == {
        (DEFAULT_CONFIG, "FILE", f"project config (default: ./{DEFAULT_CONFIG})", Path)
    }


@pytest.mark.slow
def test_a_real_core_only_install_runs_help_and_render(tmp_path, repo_root):
    """`pip install .` into a fresh virtualenv: core dependencies only, from the default index."""
    source = tmp_path / "source"  # pip builds in the source tree: keep build/ and *.egg-info out of the checkout
    # What `pip install .` builds from: the package, and templates/, which setup.py puts into the wheel as
    # envkit/templates/ (a render needs envkit's own templates beside any a project overrides).
    for folder in ("envkit", "templates"):
        shutil.copytree(repo_root / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(repo_root / name, source / name)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    pip = subprocess.run(
        [env_dir / "bin" / "pip", "install", "--quiet", str(source)], capture_output=True, text=True, env=env
    )
    assert pip.returncode == 0, pip.stderr
    envkit = env_dir / "bin" / "envkit"
    done = subprocess.run([envkit, "--help"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0 and "render" in done.stdout, done.stderr
    done = subprocess.run(
        [envkit, "render", "--all", "--check"], capture_output=True, text=True, env=env, cwd=repo_root
    )
    assert done.returncode == 0, done.stderr
    # The Docker SDK is a core dependency (build, push, and the project's .dockerignore): with no engine, one line.
    no_engine = {**env, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    done = subprocess.run([envkit, "build", "cpu"], capture_output=True, text=True, env=no_engine, cwd=repo_root)
    assert done.returncode == 2 and done.stderr.startswith("envkit: error: no Docker engine answers at"), done.stderr
    assert done.stderr.count("\n") == 1


# The distribution's name (issue 32 §9): "envkit" on the package index is another project, so pyproject's
# [project] name is envkit.DISTRIBUTION and every install hint names it; the import and the command stay envkit.
def test_the_distribution_is_named_once_and_the_command_stays_envkit():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert (project["name"], DISTRIBUTION) == ("envkit-hw", "envkit-hw")
    assert project["scripts"]["envkit"].startswith("envkit.")


def test_every_install_hint_names_the_distribution():
    from envkit.runs.figures import INSTALL_HINT
    from envkit.support.docker_client import SDK_MISSING

    assert INSTALL_HINT == (
        "uv tool install 'envkit-hw[report]', pipx install 'envkit-hw[report]' or pip install 'envkit-hw[report]'"
    )
    assert "pip install 'envkit-hw[docker]'" in SDK_MISSING
    # No hint in the code, the docs or the templates installs the other project.
    wrong = re.compile(r"pip install '?envkit(\[|\b(?!-hw))")
    texts = [*REPO_ROOT.glob("envkit/**/*.py"), *REPO_ROOT.glob("docs/*.md"), REPO_ROOT / "README.md"]
    assert texts and not [path for path in texts if wrong.search(path.read_text(encoding="utf-8"))]

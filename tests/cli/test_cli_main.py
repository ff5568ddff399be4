"""How every command ends when its reader goes away or the user presses Ctrl-C (issue 28 §14, §15)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO_ROOT
from project_copy import copy_project

from envkit import cli


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return copy_project(tmp_path_factory.mktemp("project"))


@pytest.mark.parametrize(
    "argv",
    [
        ["doctor"],
        ["doctor", "--json"],
        ["render", "--target", "cpu", "--stdout"],
        ["render", "--all", "--check"],
        ["matrix"],
        ["targets"],
        ["--help"],
        ["--version"],
        ["render", "--help"],
    ],
    ids=" ".join,
)
def test_a_reader_that_has_gone_ends_the_command_quietly(project, tmp_path, argv):
    """`envkit doctor | head -1`, made certain: the pipe's reading end is closed before envkit writes."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "ENVKIT_CACHE_DIR": str(tmp_path / "cache")}
    env["DOCKER_HOST"] = f"unix://{tmp_path}/no-engine.sock"
    # stdout buffered, as in a user's shell: unbuffered, each write fails at once and the flush at exit never does.
    env.pop("PYTHONUNBUFFERED", None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "envkit", *argv], cwd=project, stdout=write_end, stderr=subprocess.PIPE, env=env
        )
    finally:
        os.close(write_end)
    assert done.stderr == b"", done.stderr.decode()[-2000:]
    assert done.returncode in (0, 1, 141), done.returncode  # --help exits in argparse, with its own status


def test_ctrl_c_while_the_command_loads_is_one_line(monkeypatch, capsys):
    """Ctrl-C in the first ~0.1 s arrives while the command's module is imported, before it runs."""

    def interrupted(command):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["render", "--all"]) == 130
    assert capsys.readouterr().err == "envkit: interrupted\n"


def test_words_envkit_does_not_know_are_named_in_the_order_given_whatever_argparse_returns():
    # Python 3.13.5's argparse returns ["1", "--epochs"] for "... --epochs 1 --gpus x"; 3.11's the reverse.
    from envkit.cli import _as_given

    argv = ["experiment", "cpu-mnist", "--epochs", "1", "--gpus", "x"]
    assert _as_given(["1", "--epochs"], argv) == _as_given(["--epochs", "1"], argv) == ["--epochs", "1"]

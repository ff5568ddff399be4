"""How every command ends when its reader goes away or the user presses Ctrl-C (issue 28 §14, §15)."""

from __future__ import annotations

import os
import signal
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


@pytest.mark.parametrize("program", ["envkit", str(REPO_ROOT / "envkit" / "__main__.py")])
def test_ctrl_c_while_envkit_s_own_modules_load_is_one_line(program):
    """Ctrl-C before main runs (its modules still loading: a third of the tries in the first 0.2 s) was a
    KeyboardInterrupt traceback; the signal here arrives right after envkit.cli is imported, before main."""
    # Python's own handler first, as in a terminal: this process may have inherited SIGINT ignored (a CI script's
    # background job), which envkit leaves ignored (the test below).
    probe = (
        f"import os, signal, sys, time; signal.signal(signal.SIGINT, signal.default_int_handler); "
        f"sys.argv[0] = {program!r}; import envkit.cli; os.kill(os.getpid(), signal.SIGINT); time.sleep(30)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert (done.returncode, done.stderr) == (130, "envkit: interrupted\n")


@pytest.mark.parametrize("handler", ["signal.default_int_handler", "signal.SIG_IGN", "lambda *_: None"])
@pytest.mark.parametrize("program", ["myprogram", "envkit"])
def test_a_program_that_imports_envkit_cli_keeps_its_own_ctrl_c(program, handler):
    """Another program keeps whatever SIGINT handling it has; envkit itself keeps a SIGINT it was started with
    ignored (a shell's background job, nohup), as Python does. Before, it put its own handler over SIG_IGN, and
    this test read the handler this process was started with (SIG_IGN under CI's background job, not Python's)."""
    probe = (
        f"import signal, sys; handler = {handler}; signal.signal(signal.SIGINT, handler); "
        f"sys.argv[0] = {program!r}; import envkit.cli; print(signal.getsignal(signal.SIGINT) is handler)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    kept = program == "envkit" and handler == "signal.default_int_handler"  # envkit's own line replaces Python's
    assert done.stdout.strip() == str(not kept)


@pytest.mark.parametrize("program", ["envkit", str(REPO_ROOT / "envkit" / "__main__.py"), "myprogram"])
def test_envkit_s_own_process_collects_young_objects_less_often_and_leaves_them_out_of_the_exit_s_collection(program):
    """A cold render spent about 15 ms of its CPU in Python's cyclic collector (issue 42): in envkit's own process
    the young generation is collected every GC_THRESHOLD new objects, the collector still on, and every object left
    at exit is frozen (seen by an exit handler registered before envkit's, which runs after it) before the exit's
    last collection. A program that imports envkit.cli keeps Python's settings."""
    probe = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen at exit', gc.get_freeze_count() > 0))\n"
        f"sys.argv[0] = {program!r}\n"
        "default = gc.get_threshold()\n"
        "import envkit.cli\n"
        "print('collector on', gc.isenabled())\n"
        "young, *older = gc.get_threshold()\n"
        "print('young every', young == envkit.cli.GC_THRESHOLD if young != default[0] else 'default')\n"
        "print('older as Python has them', older == list(default[1:]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    own = program != "myprogram"
    assert done.stdout.splitlines() == [
        "collector on True",
        f"young every {True if own else 'default'}",
        "older as Python has them True",
        f"frozen at exit {own}",
    ]
    assert 700 < cli.GC_THRESHOLD <= 200_000  # bounded: the young objects' cycles are still collected


def test_main_hands_ctrl_c_back_to_python_so_a_command_can_undo_its_work(monkeypatch):
    """Once main runs, Ctrl-C is a KeyboardInterrupt again: a venv being replaced is put back before the line."""
    monkeypatch.setattr(signal, "getsignal", lambda number: cli._interrupted_while_loading)
    installed = []
    monkeypatch.setattr(signal, "signal", lambda number, handler: installed.append((number, handler)))
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert installed[0] == (signal.SIGINT, signal.default_int_handler)


def test_words_envkit_does_not_know_are_named_in_the_order_given_whatever_argparse_returns():
    # Python 3.13.5's argparse returns ["1", "--epochs"] for "... --epochs 1 --gpus x"; 3.11's the reverse.
    from envkit.cli import _as_given

    argv = ["experiment", "cpu-mnist", "--epochs", "1", "--gpus", "x"]
    assert _as_given(["1", "--epochs"], argv) == _as_given(["--epochs", "1"], argv) == ["--epochs", "1"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["experiment", "cpu-mnist", "--pyhton", "/usr/bin/python3"],
            "unrecognized arguments: --pyhton /usr/bin/python3; did you mean --python? (else recipe arguments follow "
            "'--': envkit experiment cpu-mnist -- --pyhton /usr/bin/python3)",
        ),
        (["doctor", "--jsno"], "unrecognized arguments: --jsno; did you mean --json?"),
        (["render", "--target=cpu", "--stdot"], "unrecognized arguments: --stdot; did you mean --stdout?"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_a_mistyped_option_is_answered_with_the_close_option_first(capsys, argv, said):
    """Issue 40 §19: before, --pyhton was answered with "recipe arguments follow '--'" alone."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == f"envkit: error: {said} (see 'envkit --help')\n"

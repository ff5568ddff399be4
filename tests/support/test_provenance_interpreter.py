"""The environment a run really ran in (issue 32 §4): under a venv's interpreter the venv's bin/ comes first on
PATH; the record's versions, distributions and lock are those of the interpreter that ran the command, and packages
other than the lock's are a warning."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envkit.support import provenance, provenance_facts

WRAPPER = Path(provenance.__file__)
LOCK = "# envkit lock\ntabulate==0.9.0 \\\n    --hash=sha256:0\nsix==1.17.0 \\\n    --hash=sha256:1\n"


@pytest.fixture
def venv(tmp_path) -> Path:
    """A venv without pip (quick), made from LOCK by the marker's account, with six 1.17.0 and tabulate 0.8.0."""
    path = tmp_path / ".venv-cuda"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    (site,) = path.glob("lib/python*/site-packages")
    for name, version in (("six", "1.17.0"), ("tabulate", "0.8.0")):
        (site / f"{name}-{version}.dist-info").mkdir()
        (site / f"{name}-{version}.dist-info" / "METADATA").write_text(f"Name: {name}\nVersion: {version}\n\nabout\n")
    lock = tmp_path / "requirements.lock"
    lock.write_text(LOCK)
    marker = {"lock": str(lock), "lock_sha256": hashlib.sha256(LOCK.encode()).hexdigest()}
    (path / provenance_facts.VENV_LOCK_MARKER).write_text(json.dumps(marker))
    tool = path / "bin" / "mytool"
    tool.write_text("#!/bin/sh\necho venv\n")
    tool.chmod(0o755)
    return path


def wrapped(
    folder: Path, python: str, *argv: str, path: str = os.environ["PATH"]
) -> tuple[subprocess.CompletedProcess, dict]:
    env = {"PATH": path, "ENVKIT_RESULTS_DIR": str(folder / "results")}
    done = subprocess.run([python, str(WRAPPER), *argv], cwd=folder, env=env, capture_output=True, text=True)
    (record,) = [json.loads(p.read_text()) for p in (folder / "results").glob("*.json")]
    return done, record


def test_the_venvs_bin_comes_first_and_the_lock_drift_is_a_warning(tmp_path, venv):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mytool").write_text("#!/bin/sh\necho elsewhere\n")
    (elsewhere / "mytool").chmod(0o755)
    python = str(venv / "bin" / "python")
    done, record = wrapped(tmp_path, python, "mytool", path=f"{elsewhere}:{os.environ['PATH']}")
    assert done.stdout == "venv\n", done.stderr
    environment = record["environment"]
    assert environment["distributions"] == ["six==1.17.0", "tabulate==0.8.0"]
    assert environment["lock_sha256"] == hashlib.sha256(LOCK.encode()).hexdigest()
    assert record["run"]["warnings"] == [
        f"the packages that ran differ from the lock {tmp_path / 'requirements.lock'}: tabulate 0.8.0 (locked 0.9.0)"
    ]


def test_a_lock_changed_since_the_venv_was_made_is_said(tmp_path, venv):
    (tmp_path / "requirements.lock").write_text(LOCK + "# relocked\n")
    _, record = wrapped(tmp_path, str(venv / "bin" / "python"), "true")
    sha = hashlib.sha256(LOCK.encode()).hexdigest()
    assert record["run"]["warnings"] == [
        f"{tmp_path / 'requirements.lock'} is no longer the lock this environment was installed from "
        f"(sha256 {sha[:12]}): remake it"
    ]


def test_a_command_that_runs_another_interpreter_is_recorded_with_that_ones_versions(tmp_path, venv):
    """The wrapper was started by this Python; the command ran the venv's (another venv's torchrun on PATH)."""
    done, record = wrapped(tmp_path, sys.executable, str(venv / "bin" / "python"), "-c", "pass")
    assert done.returncode == 0, done.stderr
    environment = record["environment"]
    assert environment["distributions"] == ["six==1.17.0", "tabulate==0.8.0"] and environment["torch"] is None
    warnings = record["run"]["warnings"]
    assert warnings[0] == (
        f"the command ran {venv / 'bin' / 'python'}, not {sys.executable} that started it: the record's versions, "
        "distributions and lock are the ones that ran"
    )
    assert warnings[1].endswith("tabulate 0.8.0 (locked 0.9.0)")

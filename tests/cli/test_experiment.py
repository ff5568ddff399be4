"""envkit experiment --python: a run on this host, through the run wrapper (issue 42: the wrapper's cost)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from paths import REPO_ROOT

PROGRAM = (
    "import os, sys\nprint(os.getppid(), 'ENVKIT_RUN_TITLE' in os.environ, file=open('seen.txt', 'w'))\nsys.exit(3)\n"
)
CONFIG = (
    "targets:\n  cpu: {kind: cpu, torch: '2.9.0'}\n"
    "experiments:\n  probe: {summary: s, kind: cpu, command: [python, probe.py]}\n"
)


def test_envkit_hands_its_last_run_over_to_the_wrapper_which_records_it_and_says_how_it_ended(tmp_path):
    """Before, envkit waited for the wrapper as its child, then said how the run ended: one more process alive for
    the whole run, and its teardown after. Now the wrapper takes envkit's place (the same process), the program
    is its child, and the wrapper writes the record and envkit's last line, with the program's status."""
    (tmp_path / "probe.py").write_text(PROGRAM)
    (tmp_path / "envkit.yaml").write_text(CONFIG)
    results = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "ENVKIT_CACHE_DIR": str(tmp_path / "cache")}
    argv = [sys.executable, "-m", "envkit", "experiment", "probe", "--python", sys.executable]
    envkit = subprocess.Popen(
        [*argv, "--results-dir", str(results)], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True
    )
    _, err = envkit.communicate(timeout=120)
    assert envkit.returncode == 3, err
    # the wrapper is envkit's process; the title it was handed is not the program's to see
    assert (tmp_path / "seen.txt").read_text() == f"{envkit.pid} False\n"
    lines = err.splitlines()
    assert lines[0].startswith("envkit: experiment probe: cd ") and lines[-1].startswith(
        "envkit: experiment probe: exit 3 after "
    ), err
    (record,) = results.glob("probe-*.json")
    run = json.loads(record.read_text())["run"]
    assert (run["status"], run["exit_status"], run["argv"][1:]) == ("ended", 3, ["probe.py"])

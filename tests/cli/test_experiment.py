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


# Each exec of this process, as the interpreter's own sitecustomize (the wrapper's site hook runs it too) sees it.
EXEC_WATCH = """import os, sys
def _watch(event, args):
    if event == "os.exec":
        with open(os.environ["EXEC_SEEN"], "a") as seen:
            seen.write(os.fsdecode(args[0]) + "\\n")
sys.addaudithook(_watch)
"""


def test_the_wrapper_runs_in_envkits_process_when_it_would_start_envkits_own_interpreter(tmp_path):
    """Issue 42 goal 2: the exec started a second interpreter that imported, again, what envkit had (about 30 ms of
    each run); with --python naming the interpreter envkit runs in, the wrapper's main runs in envkit's process
    (the same process the exec made), and the run is recorded alike. Another interpreter is still exec'd."""
    (tmp_path / "probe.py").write_text(PROGRAM)
    (tmp_path / "envkit.yaml").write_text(CONFIG)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(EXEC_WATCH)
    (tmp_path / "other").symlink_to(sys.executable)  # the same binary under another name: another interpreter's path
    seen = tmp_path / "exec-seen.txt"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(tmp_path / "site")]),
        "ENVKIT_CACHE_DIR": str(tmp_path / "cache"),
        "EXEC_SEEN": str(seen),
    }
    for python, execs in ((sys.executable, []), (str(tmp_path / "other"), [str(tmp_path / "other")])):
        results = tmp_path / f"results-{len(execs)}"
        argv = [
            sys.executable,
            "-m",
            "envkit",
            "experiment",
            "probe",
            "--python",
            python,
            "--results-dir",
            str(results),
        ]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 3, done.stderr
        assert done.stderr.splitlines()[-1].startswith("envkit: experiment probe: exit 3 after "), done.stderr
        assert (seen.read_text().splitlines() if seen.exists() else []) == execs
        seen.unlink(missing_ok=True)
        (record,) = results.glob("probe-*.json")
        run = json.loads(record.read_text())["run"]
        assert (run["status"], run["exit_status"], run["argv"]) == ("ended", 3, [python, "probe.py"])

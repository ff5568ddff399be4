"""A run's own output (issue 32 §5): its stdout and stderr are shown as they come and kept in its run folder, a
failed run's record carries the end of its stderr, an experiment's patterns read metrics from what it printed, and
an empty run folder is not left behind."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from envkit.support import provenance, provenance_output

WRAPPER = Path(provenance.__file__)
ACCURACY = {"patterns": {"accuracy": r"Accuracy: \d+/\d+ \((\d+%)\)"}}


def wrapped(folder: Path, *argv: str, **env: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    environment = {"PATH": os.environ["PATH"], "ENVKIT_RESULTS_DIR": str(folder / "results"), **env}
    done = subprocess.run(
        [sys.executable, str(WRAPPER), *argv], cwd=folder, env=environment, capture_output=True, text=True, timeout=120
    )
    return done, [json.loads(path.read_text()) for path in sorted((folder / "results").glob("*.json"))]


def test_the_output_is_shown_and_kept_and_a_failed_runs_record_ends_with_its_stderr(tmp_path):
    body = "import sys\nprint('epoch 1')\nfor n in range(30):\n    print(f'line {n}', file=sys.stderr)\nsys.exit(3)\n"
    (tmp_path / "train.py").write_text(body)
    done, (record,) = wrapped(tmp_path, sys.executable, "train.py")
    assert done.returncode == 3 and done.stdout == "epoch 1\n" and done.stderr.endswith("line 29\n")
    log = record["run"]["log"]
    assert (tmp_path / "results" / log["stdout"]).read_text() == "epoch 1\n"
    assert (tmp_path / "results" / log["stderr"]).read_text() == done.stderr
    assert record["run"]["stderr_tail"] == [f"line {n}" for n in range(10, 30)]


def test_patterns_read_an_unmodified_scripts_metrics_and_a_metrics_file_wins(tmp_path):
    body = "print('Test set: Average loss: 1.1795, Accuracy: 170/300 (57%)')\nprint('loss: 0.25')\n"
    (tmp_path / "train.py").write_text(body)
    patterns = json.dumps({**ACCURACY, "key_value": True})
    done, (record,) = wrapped(tmp_path, sys.executable, "train.py", ENVKIT_METRIC_PATTERNS=patterns)
    assert done.returncode == 0 and record["metrics"] == {"accuracy": 0.57, "loss": 0.25}
    assert "stderr_tail" not in record["run"]
    body += "import json, os, pathlib\npathlib.Path(os.environ['ENVKIT_METRICS_DIR'], 'metrics.json').write_text('{\"loss\": 0.5}')\n"
    (tmp_path / "train.py").write_text(body)
    (tmp_path / "results" / f"{record['run_name']}.json").unlink()
    done, (record,) = wrapped(tmp_path, sys.executable, "train.py", ENVKIT_METRIC_PATTERNS=patterns)
    assert record["metrics"] == {"accuracy": 0.57, "loss": 0.5}


def test_key_value_lines_are_read_only_when_asked(tmp_path):
    (tmp_path / "train.py").write_text("print('loss: 0.25')\n")
    done, (record,) = wrapped(tmp_path, sys.executable, "train.py", ENVKIT_METRIC_PATTERNS=json.dumps(ACCURACY))
    assert record["metrics"] is None


def test_a_run_that_prints_nothing_leaves_no_folder_behind(tmp_path):
    done, (record,) = wrapped(tmp_path, sys.executable, "-c", "pass")
    assert done.returncode == 0 and record["run"]["log"] == {}
    assert [path.name for path in (tmp_path / "results").iterdir()] == [f"{record['run_name']}.json"]


def test_a_program_that_writes_its_own_record_keeps_its_log_beside_it(tmp_path):
    body = (
        "import json, os, pathlib\nprint('trained')\n"
        "record = {'recipe': 'mnist', 'run_id': os.environ['ENVKIT_RUN_ID']}  # the run's own record names it\n"
        "pathlib.Path(os.environ['ENVKIT_RESULTS_DIR'], 'mnist-1.json').write_text(json.dumps(record))\n"
    )
    (tmp_path / "train.py").write_text(body)
    done, (record,) = wrapped(tmp_path, sys.executable, "train.py")
    (folder,) = [path for path in (tmp_path / "results").iterdir() if path.is_dir()]
    assert record["run"]["log"] == {"stdout": f"{folder.name}/stdout.log"} and sorted(os.listdir(folder)) == [
        "stdout.log"
    ]


def test_a_child_left_running_with_the_output_open_does_not_hold_the_record(tmp_path):
    """A background child keeps the pipe open: the wrapper waits for it 2 s at most (subprocess's timeout guards)."""
    done, (record,) = wrapped(tmp_path, "sh", "-c", "echo started; sleep 60 &")
    assert done.returncode == 0 and record["run"]["exit_status"] == 0


def test_a_log_that_cannot_be_written_still_shows_the_output_and_drains_the_pipe(tmp_path):
    """An unread pipe would stop the program once it filled (64 KB): the copy goes on without its log."""
    read, write = os.pipe()
    shown = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    log, matcher = provenance_output.Log(tmp_path / "gone" / "x.log", 2**20), provenance_output.Matcher({}, {})
    reader = threading.Thread(target=provenance_output._copy, args=(read, shown, log, matcher))
    reader.start()
    os.write(write, b"x" * 200_000)
    os.close(write)
    reader.join(30)
    assert not reader.is_alive() and shown.buffer.getvalue() == b"x" * 200_000


def test_a_huge_output_keeps_a_bounded_log_and_its_metrics_in_bounded_memory(tmp_path):
    """Before: the log was as large as the output (1 GiB gave 1 GiB), and patterns read it whole (RSS 2.1 GB)."""
    body = (
        "import sys\nprint('first line')\nprint('accuracy: 0.75')\n"
        "for _ in range(50):\n    sys.stdout.write('x' * 1_000_000)\n"  # 50 MB in one line: no newline to cut at
        "print()\nfor n in range(1000):\n    print(f'line {n}')\n"
    )
    (tmp_path / "train.py").write_text(body)
    patterns = json.dumps({**ACCURACY, "key_value": True})
    # the wrapper's peak memory, from a small parent: a child forked from pytest counts pytest's memory as its own
    measure = (
        "import os, subprocess, sys\nwrapper = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
        "_, status, usage = os.wait4(wrapper.pid, 0)\nprint(os.waitstatus_to_exitcode(status), usage.ru_maxrss)\n"
    )
    command = [sys.executable, "-c", measure, sys.executable, str(WRAPPER), sys.executable, "train.py"]
    env = {"PATH": os.environ["PATH"], "ENVKIT_RESULTS_DIR": str(tmp_path / "results"), "ENVKIT_LOG_BYTES": "200000"}
    done = subprocess.run(
        command, cwd=tmp_path, env={**env, "ENVKIT_METRIC_PATTERNS": patterns}, capture_output=True, text=True
    )
    status, peak = map(int, done.stdout.split())
    (path,) = (tmp_path / "results").glob("*.json")
    record = json.loads(path.read_text())
    assert status == 0 and record["metrics"] == {"accuracy": 0.75}
    log = (tmp_path / "results" / record["run"]["log"]["stdout"]).read_bytes()
    cut = len(b"first line\naccuracy: 0.75\n") + 50_000_001 + sum(len(f"line {n}\n") for n in range(1000)) - 200_000
    assert record["run"]["log_cut"] == {"stdout": cut}
    assert log.startswith(b"first line\naccuracy: 0.75\nxxx") and log.endswith(b"line 998\nline 999\n")
    assert f"\n[envkit_run: {cut} bytes cut here]\n".encode() in log and len(log) < 200_100
    assert peak < 60_000, f"{peak} KiB: the wrapper or its program held the output"

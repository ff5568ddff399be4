"""The run wrapper against a hostile program or results folder (issue 33 §8): it never loses the record or the
program's exit status, never hangs, reads nothing whole past a bound nor through a symlink, and names in the
record (run.unread) what it could not read.

These are unit cases, not tests/hostile/cases.yaml entries: that corpus runs the envkit CLI and requires that
nothing in the project changes, while each case here runs a program whose run writes a record.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from results_contract import assert_valid_results

from envkit.runs import results as report_results
from envkit.support import bounded_load, provenance, provenance_records

WRAPPER = Path(provenance.__file__)
HANG = 120  # seconds after which a run that has not ended is a hang, not a slow machine


def wrapped(tmp_path: Path, body: str, *, results: Path | None = None, limit_memory: bool = False):
    """Run ``python train.py`` (``body``) through the wrapper from ``tmp_path``; (the finished process, the
    records). ``limit_memory``: the wrapper and its program get 1 GiB of address space."""
    (tmp_path / "train.py").write_text("import json, os, pathlib, sys\n" + body)
    results = results or tmp_path / "results"
    done = subprocess.run(
        [sys.executable, str(WRAPPER), sys.executable, "train.py"],
        cwd=tmp_path,
        env={**os.environ, "ENVKIT_RESULTS_DIR": str(results)},
        capture_output=True,
        text=True,
        timeout=HANG,
        stdin=subprocess.DEVNULL,
        preexec_fn=(lambda: resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))) if limit_memory else None,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done, records(results)


def records(results: Path) -> list[dict]:
    """The records the report would read, each checked against the results contract."""
    found = [path for path in sorted(results.glob("*.json")) if path.is_file() and not path.is_symlink()]
    return [assert_valid_results(path) for path in found if path.stat().st_size < 2**20]


def unread(record: dict) -> str:
    return "\n".join(record["run"]["unread"])


RESULTS = "results = pathlib.Path(os.environ['ENVKIT_RESULTS_DIR'])\n"
METRICS = "metrics = pathlib.Path(os.environ['ENVKIT_METRICS_DIR'])\n"
SERIES = METRICS + "series = metrics / 'plots' / 'metrics'\nseries.mkdir(parents=True)\n"
GOOD_SERIES = "(series / 'acc.tsv').write_text('step\\tacc\\n0\\t0.5\\n1\\t0.75\\n')\n"


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (RESULTS + "os.symlink('missing', results / 'pred.json')\n", "pred.json: a symbolic link, not followed"),
        (RESULTS + "os.mkfifo(results / 'progress.json')\n", "progress.json: a FIFO, not a regular file"),
        (METRICS + "(metrics / 'metrics.json').write_text('[' * 100_000 + ']' * 100_000)\n", "nested deeper than 63"),
        (METRICS + "(metrics / 'metrics.json').mkdir()\n", "metrics.json: a directory, not a regular file"),
        (METRICS + "(metrics / 'metrics.json').symlink_to('/dev/zero')\n", "metrics.json: a symbolic link"),
        (SERIES + GOOD_SERIES + "(series / 'loss.tsv').write_bytes(b'step\\tloss\\n0\\t\\xff\\n')\n", "not UTF-8"),
        (
            SERIES + GOOD_SERIES + "(series / 'loss.tsv').write_text('step\\tloss\\n0\\t' + '1' * 200_000)\n",
            "loss.tsv: not TSV (field larger than field limit",
        ),
        (SERIES + GOOD_SERIES + "os.mkfifo(series / 'loss.tsv')\n", "loss.tsv: a FIFO, not a regular file"),
        (SERIES + GOOD_SERIES + "(series / 'loss.tsv').symlink_to('/dev/zero')\n", "loss.tsv: a symbolic link"),
        (SERIES + GOOD_SERIES + "(series / 'loss.tsv').mkdir()\n", None),  # a folder: nothing to read, nothing lost
        (
            SERIES + GOOD_SERIES + "(series / 'loss.tsv').write_text('step\\tloss\\n' + '1\\t1\\n' * 200_001)\n",
            "loss.tsv: past 200000 points in the run's series",
        ),
    ],
    ids=[
        "dangling-symlink-made-in-results",
        "fifo-made-in-results",
        "metrics-100000-nested-lists",
        "metrics-a-directory",
        "metrics-dev-zero",
        "series-not-utf8",
        "series-200kb-field",
        "series-fifo",
        "series-dev-zero",
        "series-a-directory",
        "series-past-the-points-a-record-holds",
    ],
)
def test_what_the_program_left_cannot_cost_the_record_or_its_status(tmp_path, body, named):
    done, (record,) = wrapped(tmp_path, body + "sys.exit(5)\n")
    assert done.returncode == 5 and record["run"]["exit_status"] == 5
    if named is None:
        assert record["run"]["unread"] == []
    else:
        assert named in unread(record) and named in done.stderr
    if "series" in body:
        assert record["series"]["acc"] == {"step": [0, 1], "value": [0.5, 0.75]}, "the readable series is kept"


def test_a_dangling_symlink_already_in_the_results_folder_stops_nothing(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "pred.json").symlink_to("missing")
    done, (record,) = wrapped(tmp_path, "print('trained')\nsys.exit(3)\n")
    assert done.returncode == 3 and done.stdout == "trained\n" and record["run"]["exit_status"] == 3
    assert record["run"]["unread"] == [], "a file that did not change during the run is not this run's"


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (
            METRICS + "with open(metrics / 'metrics.json', 'wb') as f:\n    f.truncate(2 * 2**30)\n",
            "metrics.json: larger than 16 MiB",
        ),
        (
            RESULTS + "with open(results / 'predictions.json', 'wb') as f:\n    f.truncate(1_080_000_000)\n",
            "predictions.json: larger than 16 MiB",
        ),
    ],
    ids=["metrics-2gb", "predictions-1gb-in-results"],
)
def test_a_huge_file_is_sized_not_read(tmp_path, body, named):
    """Under 1 GiB of address space: a file read whole would be a MemoryError."""
    done, (record,) = wrapped(tmp_path, body + "sys.exit(6)\n", limit_memory=True)
    assert done.returncode == 6 and record["run"]["exit_status"] == 6 and named in unread(record)


def test_a_metrics_symlink_to_another_file_is_neither_read_nor_copied(tmp_path):
    (tmp_path / "credentials").write_text('{"token": "s3cr3t-value"}')
    for where in ("os.environ['ENVKIT_METRICS_DIR']", "'dvclive'"):
        body = (
            "sys.modules['dvclive'] = type(sys)('dvclive')\n"  # stands in for dvclive, whose ./dvclive is read
            f"folder = pathlib.Path({where})\nfolder.mkdir(exist_ok=True)\n"
            "(folder / 'metrics.json').symlink_to(pathlib.Path('credentials').resolve())\n"
        )
        done, found = wrapped(tmp_path, body)
        record = next(record for record in found if "metrics.json" in unread(record))
        assert done.returncode == 0 and record["metrics"] is None and "a symbolic link, not followed" in unread(record)
        (tmp_path / "dvclive" / "metrics.json").unlink(missing_ok=True)
    copies = [path for path in (tmp_path / "results").rglob("*") if path.is_file() and not path.is_symlink()]
    assert copies and not any(b"s3cr3t" in path.read_bytes() for path in copies)


def test_metrics_nested_past_what_the_report_reads_are_refused_when_written(tmp_path):
    """70 levels deep: recorded, the report would refuse the whole record; the wrapper leaves the metrics out."""
    body = METRICS + "(metrics / 'metrics.json').write_text(json.dumps({'a': json.loads('[' * 69 + ']' * 69)}))\n"
    done, (record,) = wrapped(tmp_path, body)
    assert record["metrics"] is None and "nested deeper than 63 levels" in unread(record)
    runs, warnings = report_results.load_results(tmp_path / "results")
    assert len(runs) == 1 and warnings == []
    assert (
        provenance_records.MAX_DEPTH == bounded_load.MAX_DEPTH and provenance_records.MAX_READ == bounded_load.MAX_BYTES
    )


def test_a_results_folder_it_cannot_write_is_one_line_and_the_program_runs_with_its_status(tmp_path):
    """The program runs all the same (its output, and what it saves elsewhere, are worth more than its record);
    the line says at once that no results file will be written."""
    (tmp_path / "a-file").write_text("")
    done, found = wrapped(tmp_path, "print('trained')\nsys.exit(9)\n", results=tmp_path / "a-file" / "results")
    assert done.returncode == 9 and done.stdout == "trained\n" and found == []
    assert done.stderr.count("\n") == 1 and "cannot write results into" in done.stderr
    assert "no results file is written" in done.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_results_folder_is_one_line_too(tmp_path):
    (tmp_path / "results").mkdir(mode=0o555)
    done, found = wrapped(tmp_path, "sys.exit(9)\n")
    assert done.returncode == 9 and found == [] and "cannot write results into" in done.stderr


@pytest.mark.parametrize("number", [signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_wrapper_reaches_the_program_and_the_run_is_recorded(tmp_path, number):
    """A scheduler's cancel, a closed terminal, a preemption notice: the program gets the signal, ends its own
    way, and the record has its status."""
    body = (
        METRICS + "import signal, time\n"
        "def stop(number, frame):\n"
        "    (metrics / 'metrics.json').write_text(json.dumps({'signal': number}))\n"
        "    sys.exit(40)\n"
        f"signal.signal({int(number)}, stop)\n"
        "pathlib.Path('ready').touch()\n"
        "for _ in range(120):\n    time.sleep(1)\n"  # a program left behind ends by itself
        "sys.exit(41)\n"
    )
    (tmp_path / "train.py").write_text("import json, os, pathlib, sys\n" + body)
    wrapper = subprocess.Popen(
        [sys.executable, str(WRAPPER), sys.executable, "train.py"],
        cwd=tmp_path,
        env={**os.environ, "ENVKIT_RESULTS_DIR": str(tmp_path / "results")},
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(HANG * 10):
            if (tmp_path / "ready").exists() or wrapper.poll() is not None:
                break
            time.sleep(0.1)
        wrapper.send_signal(number)
        _, stderr = wrapper.communicate(timeout=HANG)
    finally:
        wrapper.kill()
    (record,) = records(tmp_path / "results")
    assert wrapper.returncode == 40 and "Traceback" not in stderr
    assert record["run"]["exit_status"] == 40 and record["metrics"] == {"signal": int(number)}


def test_a_linked_metrics_folder_is_not_followed(tmp_path):
    """Before: plots/metrics -> / made the wrapper walk / (27 s) and record series from files outside the run."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.tsv").write_text("step\tsecret\n0\t1\n")
    body = METRICS + f"(metrics / 'plots').mkdir()\nos.symlink({str(outside)!r}, metrics / 'plots' / 'metrics')\n"
    done, (record,) = wrapped(tmp_path, body)
    assert done.returncode == 0 and record["series"] == {}
    assert "plots/metrics: a symbolic link, not followed" in unread(record)


def test_a_temporary_file_is_not_left_behind_when_the_record_cannot_be_written(tmp_path):
    def full(_source, _target):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        provenance_records.replace(tmp_path / "run.json", b"{}\n", full)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_keeps_the_record_and_names_what_was_not_written(tmp_path):
    """Before: a 1 MB results folder and a program printing 3 MB left no record, and a .json.tmp behind."""
    results = tmp_path / "results"
    results.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(results)], capture_output=True).returncode:
        pytest.skip("a 1 MB tmpfs needs root (mount)")
    try:
        done, (record,) = wrapped(tmp_path, "for n in range(30_000):\n    print(f'{n:099d}')\n", results=results)
        left = sorted(str(path.relative_to(results)) for path in results.rglob("*"))
    finally:
        subprocess.run(["umount", str(results)], check=True)
    assert done.returncode == 0 and record["run"]["exit_status"] == 0 and record["run"]["status"] == "ended"
    assert any("stdout.log: No space left on device" in line for line in record["run"]["unwritten"])
    assert not [name for name in left if name.endswith(".tmp")], left


def test_a_program_that_removes_the_results_folder_still_gets_its_record_and_log(tmp_path):
    """Before: the record was lost (one warning line)."""
    body = RESULTS + "import shutil\nprint('trained')\nsys.stdout.flush()\nshutil.rmtree(results)\n"
    done, (record,) = wrapped(tmp_path, body)
    assert done.returncode == 0 and record["run"]["exit_status"] == 0
    assert any("was removed during the run: written again" in line for line in record["run"]["warnings"])
    assert (tmp_path / "results" / record["run"]["log"]["stdout"]).read_text() == "trained\n"

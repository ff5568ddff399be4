"""Runs that overlap in one results folder (issue 33 §7): each keeps its own record, exit status and metrics.

The wrapper gives its program a run id (ENVKIT_RUN_ID), adopts only the records that name it, and takes its
record's name by making the run's folder, which one process alone can do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from results_contract import assert_valid_results

from envkit.support import provenance, provenance_records

WRAPPER = Path(provenance.__file__)

# Every run starts before any writes, and none ends before all have written: each sees the others' files change.
PROGRAM = """\
import json, os, pathlib, sys, time
index, kind, code, barrier, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), pathlib.Path(sys.argv[4]), int(sys.argv[5])

def meet(stage):
    (barrier / stage).mkdir(exist_ok=True)
    (barrier / stage / index).touch()
    for _ in range(6000):  # a run that never comes (it failed to start) holds the others a minute, not forever
        if len(list((barrier / stage).iterdir())) >= count:
            break
        time.sleep(0.01)

meet("started")
if kind == "recipe":
    record = {"recipe": "mnist", "run_id": os.environ["ENVKIT_RUN_ID"], "run_name": index, "environment": {}}
    (pathlib.Path(os.environ["ENVKIT_RESULTS_DIR"]) / f"mnist-{index}.json").write_text(json.dumps(record))
elif kind == "dvclive":  # dvclive's Live() writes ./dvclive, which every run started in this folder shares
    sys.modules["dvclive"] = type(sys)("dvclive")  # stands in for dvclive
    pathlib.Path("dvclive").mkdir(exist_ok=True)
    pathlib.Path("dvclive", "metrics.json").write_text(json.dumps({"index": int(index)}))
elif kind == "imports":  # imports dvclive, and fails before its Live() wrote anything
    sys.modules["dvclive"] = type(sys)("dvclive")
elif kind == "command":
    (pathlib.Path(os.environ["ENVKIT_METRICS_DIR"]) / "metrics.json").write_text(json.dumps({"index": int(index)}))
meet("written")
sys.exit(code)
"""


def overlapping(tmp_path: Path, runs: list[tuple[str, str, int]]) -> tuple[list[int], dict[str, dict]]:
    """Start every (experiment, kind, exit status) run at once into one results folder; their exit statuses and
    the records by the index each run was given."""
    (tmp_path / "program.py").write_text(PROGRAM)
    (tmp_path / "barrier").mkdir()
    results = tmp_path / "results"
    processes = [
        subprocess.Popen(
            [sys.executable, str(WRAPPER), sys.executable, "program.py", str(index), kind, str(code)]
            + [str(tmp_path / "barrier"), str(len(runs))],
            cwd=tmp_path,
            env={**os.environ, "ENVKIT_RESULTS_DIR": str(results), "ENVKIT_EXPERIMENT": experiment},
        )
        for index, (experiment, kind, code) in enumerate(runs)
    ]
    statuses = [process.wait(timeout=300) for process in processes]
    records = {}
    for path in sorted(results.glob("*.json")):
        record = json.loads(path.read_text()) if path.name.startswith("mnist-") else assert_valid_results(path)
        index = record["run"]["argv"][2]
        assert index not in records, f"two records claim run {index}: {path.name} and {records[index]['path']}"
        records[index] = {**record, "path": path.name}
    return statuses, records


@pytest.mark.parametrize(
    "runs",
    [
        # the reported case: a cpu and a gpu run of mnist overlap, and the gpu run fails with 7
        [("cpu-mnist", "recipe", 0), ("gpu-mnist", "recipe", 7)],
        # a command run overlapping a recipe run
        [("cpu-mnist", "recipe", 0), ("train", "command", 0)],
        # sixteen: recipes and commands of two experiments, all named in the same second, one failing
        [
            (("cpu-mnist", "train")[index % 2], ("recipe", "command")[index % 2], 7 if index == 5 else 0)
            for index in range(16)
        ],
    ],
    ids=["a-cpu-and-a-gpu-run", "a-command-and-a-recipe", "sixteen-runs"],
)
def test_overlapping_runs_each_keep_their_own_record_status_and_metrics(tmp_path, runs):
    statuses, records = overlapping(tmp_path, runs)
    assert statuses == [code for _, _, code in runs]
    assert sorted(records, key=int) == [str(index) for index in range(len(runs))], "one record for every run"
    for index, (experiment, kind, code) in enumerate(runs):
        record = records[str(index)]
        run = record["run"]
        assert (run["experiment"], run["exit_status"]) == (experiment, code), record["path"]
        if kind == "recipe":
            assert record["path"] == f"mnist-{index}.json" and record["run_id"] == run["run_id"]
        else:
            assert record["metrics"] == {"index": index}
            assert json.loads((tmp_path / "results" / record["run_name"] / "metrics.json").read_text()) == {
                "index": index
            }, "the run's folder is its own and kept"
    assert len({record["run"]["run_id"] for record in records.values()}) == len(runs)


def test_a_run_that_wrote_no_metrics_never_takes_a_dvclive_runs_from_the_shared_folder(tmp_path):
    """Before: a run whose program wrote nothing, overlapping a dvclive run started in the same folder, recorded
    that run's metrics and series as its own, since ./dvclive changed during it."""
    statuses, records = overlapping(tmp_path, [("train", "dvclive", 0), ("prepare", "nothing", 3)])
    assert statuses == [0, 3]
    assert records["0"]["metrics"] == {"index": 0}
    assert records["1"]["run"]["exit_status"] == 3 and records["1"]["metrics"] is None


def test_a_run_that_imported_dvclive_and_wrote_nothing_never_takes_an_overlapping_runs_metrics(tmp_path):
    """Before: a failed run whose program imported dvclive but wrote nothing took the concurrent dvclive run's
    metrics from ./dvclive, which changed during it."""
    statuses, records = overlapping(tmp_path, [("train", "dvclive", 0), ("other", "imports", 3)])
    assert statuses == [0, 3]
    assert records["0"]["metrics"] == {"index": 0}
    assert records["1"]["run"]["exit_status"] == 3 and records["1"]["metrics"] is None


def test_a_run_takes_the_next_free_name_and_never_writes_over_a_record(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "train-x.json").write_text("{}")  # an earlier run's record, its folder gone
    (results / "train-x-2").mkdir()  # a run under way
    assert provenance.claim(results, "train-x") == ("train-x-3", results / "train-x-3")
    assert (results / "train-x-3").is_dir() and not (results / "train-x").exists()
    with pytest.raises(FileExistsError):
        provenance_records.write_new(results / "train-x.json", b"{}\n")
    assert (results / "train-x.json").read_text() == "{}" and sorted(p.name for p in results.iterdir()) == [
        "train-x-2",
        "train-x-3",
        "train-x.json",
    ], "no temporary file is left behind"

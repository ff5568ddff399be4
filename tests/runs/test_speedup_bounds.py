"""A speed-up beyond the devices or processes a row used against its baseline's (issue 32, `make demo` on 2 CPUs:
DDP×2 against one process read 6.27×) is flagged in the table, null in csv/json and left out of the speed-up
figure; rows on another device than their baseline, or within the bound, keep theirs as results."""

from __future__ import annotations

import dataclasses
import json

import pytest
from paths import DATA

from envkit.runs.formats import render_report
from envkit.runs.page_adapter import page_from_report
from envkit.runs.report import build_report
from envkit.runs.results import Stat, load_results
from envkit.runs.speedup_bounds import conditions_flag

RESULTS = DATA / "results" / "mixed"


@pytest.fixture
def too_fast():
    """The mixed results with the cifar DDP×2 run 6.27 times faster per train epoch than the one process."""
    results, _ = load_results(RESULTS)
    ddp = next(run for run in results if run.recipe == "cifar" and run.configuration["world_size"] == 2)
    timing = {**ddp.timing, "train_epoch_s": Stat(19.0 / 6.27, 0.1, 4)}
    return [dataclasses.replace(ddp, timing=timing) if run is ddp else run for run in results]


def test_a_speedup_beyond_the_processes_used_is_flagged_not_a_result(too_fast):
    text = render_report(build_report(too_fast), "md")
    assert "| 6.27× (beyond 2 processes: not a result) |" in text
    rows = {row["configuration"]: row for row in json.loads(render_report(build_report(too_fast), "json"))["rows"]}
    assert rows["cpu DDP×2"]["speedup"] is None
    assert rows["cpu DDP×2"]["speedup_beyond"] == "6.27× beyond 2 processes: not a result"
    assert rows["cpu ×1"]["speedup"] == 1.0 and rows["cpu ×1"]["speedup_beyond"] is None


def test_the_flagged_speedup_is_left_out_of_the_figure_and_says_why(too_fast):
    page = page_from_report(build_report(too_fast), [])
    cifar = next(comparison for comparison in page.comparisons if comparison.title.startswith("cifar"))
    ddp = next(target for target in cifar.targets if target.label.startswith("cpu DDP×2"))
    assert ddp.speedup is None
    assert "speed-up 6.27× beyond 2 processes: not a result: left out of the speed-up figure" in ddp.failed
    assert any("6.27× (beyond 2 processes: not a result)" in cell for cell in ddp.cells)


def test_speedups_within_the_devices_or_across_devices_stay_results():
    results, _ = load_results(RESULTS)
    report = build_report(results)
    rows = [row for section in report.sections for row in section.rows]
    assert all(row.speedup_beyond is None for row in rows)
    # DDP×2 at 1.58× is within 2 processes; the cuda row's 1.60× over a TPU core is another device: no bound.
    assert {row.label: round(row.speedup, 2) for row in rows if row.label in ("cpu DDP×2", "cuda ×1")} == {
        "cpu DDP×2": 1.58,
        "cuda ×1": 1.6,
    }


def test_a_row_on_other_hardware_than_its_baseline_has_no_bound(too_fast):
    """More devices of another model (or another TPU backend) may be faster by more than their count."""
    other = [
        dataclasses.replace(run, environment={**run.environment, "device_name": "Other CPU"})
        if run.recipe == "cifar" and run.configuration["world_size"] == 2
        else run
        for run in too_fast
    ]
    assert all(row.speedup_beyond is None for section in build_report(other).sections for row in section.rows)


def measured(load: list[float], omp: str | None, torch_threads: list[int], usable: float = 2):
    """A run of the mixed results as the run wrapper records its conditions (issue 40 §5)."""
    (run,) = [run for run in load_results(RESULTS)[0] if run.recipe == "cifar"][:1]
    variables = {"OMP_NUM_THREADS": omp, "MKL_NUM_THREADS": None}
    conditions = {"thread_variables": variables, "torch_threads": torch_threads, "cpus": 2, "usable_cpus": usable}
    return dataclasses.replace(run, run={"load_average": load, "conditions": conditions, "exit_status": 0})


def test_a_speedup_measured_on_a_busy_host_or_under_other_conditions_says_so():
    """Issue 40 §5: on a host with load 9 on 2 cores, 2 threads took 34.9 s and 1 thread 19.5 s: "1.79× faster"."""
    one, two = measured([9.1, 8.7], "1", [1]), measured([8.9, 9.0], "2", [2])
    assert conditions_flag([one], [two]) == "host busy: load 9.1 on 2 CPUs; this speed-up is not a result"
    # a run's own threads are its load, not another job's: two threads on two CPUs end with a load of 4 or so
    quiet_one, quiet_two = measured([0.2, 1.1], "1", [1]), measured([0.1, 3.9], "2", [2])
    assert (
        conditions_flag([quiet_one], [quiet_two])
        == "1 thread on 2 CPUs, the baseline 2 threads on 2 CPUs: not like for like"
    )
    assert conditions_flag([quiet_two, quiet_two], [quiet_two]) is None  # like for like
    # the thread budget from OMP_NUM_THREADS where torch was not imported; older records say nothing
    assert conditions_flag([measured([0.1, 0.9], "4", [], usable=4)], [quiet_two]) == (
        "4 threads on 4 CPUs, the baseline 2 threads on 2 CPUs: not like for like"
    )
    older = dataclasses.replace(quiet_one, run={"exit_status": 0})
    assert conditions_flag([older], [quiet_two]) is None

"""One row builder for any runs measured here (envkit.runs.rows, issue 41 §1): a recipe's runs and a command's go
through the same rule, every number over the successful runs, a failed one counted and said."""

from __future__ import annotations

import dataclasses

import pytest
from paths import DATA

from envkit.runs.formats import render_report
from envkit.runs.report import build_report
from envkit.runs.results import Stat, load_results, stat_of
from envkit.runs.rows import pooled
from envkit.runs.speedups import run_values


def test_pooled_stats_equal_stats_of_all_samples():
    first, second = [1.0, 2.0, 4.0], [3.0, 7.0]
    combined = pooled([Stat(**stat_of(first)), Stat(**stat_of(second))])
    expected = stat_of(first + second)
    assert combined.mean == pytest.approx(expected["mean"])
    assert combined.std == pytest.approx(expected["std"])
    assert combined.n == 5


def _wrapped(run, name: str, exit_status: int, wall_time_s: float, warnings: list[str]):
    """``run`` as the run wrapper records a recipe it started: its run block, with its exit status."""
    block = {"experiment": None, "argv": ["python", "train.py"], "exit_status": exit_status}
    block |= {"wall_time_s": wall_time_s, "warnings": warnings}
    return dataclasses.replace(run, run_name=name, started_at=f"2026-01-01T00:00:0{exit_status}Z", run=block)


def test_a_recipes_failed_run_is_counted_and_left_out_of_its_rows_numbers_as_a_commands_is():
    """Before: a recipe's row pooled the timing of a run the run wrapper saw fail, said nothing of it, and dropped
    the wrapper's warnings; a command's row left such a run out and counted it. Now one rule for both."""
    (run,) = [run for run in load_results(DATA / "results" / "mixed")[0] if run.run_name == "cuda"]
    ok = _wrapped(run, "ok", 0, 60.0, ["the lock did not run"])
    failed = _wrapped(dataclasses.replace(run, timing={**run.timing, "total_s": 500.0}), "failed", 1, 9.0, [])
    report = build_report([ok, failed])
    (section,) = report.sections
    (row,) = section.rows
    assert (row.runs, row.failed, row.total_s.mean, row.total_s.n) == (2, 1, run.timing["total_s"], 1)
    assert row.wall_time_s == Stat(60.0, 0.0, 1)
    assert run_values(row) == [run.timing["total_s"]]  # the speed-up's samples: the successful run's alone
    assert "cuda ×1: 1 of its 2 runs failed (the run wrapper's exit status)" in "\n".join(section.notes)
    assert "cuda ×1: the run wrapper warns: the lock did not run" in section.notes
    assert ",failed," in render_report(report, "csv").splitlines()[0]
    assert row.metrics == {}  # the recipe's test accuracy is its column, never a metric column too


def test_a_recipes_run_whose_device_block_shows_no_accelerator_is_a_cpu_stand_in_as_a_commands_is():
    """Before: a recipe's row was a stand-in only in a notebook's CPU mode, so a cuda run the run wrapper saw
    initialise no GPU got a speed-up as a GPU's; a command's such run is a CPU run, kept out. Now one rule."""
    runs = {
        run.run_name: run for run in load_results(DATA / "results" / "mixed")[0] if run.run_name in ("cuda", "tpu1")
    }
    block = {"label": "cuda", "accelerator": "cpu", "name": "AMD EPYC", "observed": True}
    cpu_run = dataclasses.replace(runs["cuda"], device=block)
    (section,) = build_report([runs["tpu1"], cpu_run]).sections
    rows = {row.label: row for row in section.rows}
    assert (rows["cuda ×1"].cpu_stand_in, rows["cuda ×1"].speedup) == (True, None)
    assert rows["tpu ×1"].verdict == "baseline"
    assert any(note.startswith("cuda ×1: runs of an accelerator's target") for note in section.notes)

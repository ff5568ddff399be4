"""The time to an experiment's goal is the report model's (issue 41 §1: page_adapter a view of the model): every
row carries it, and the page shows the model's numbers."""

from __future__ import annotations

import pytest
from paths import DATA

from envkit.runs.goals import goal_of
from envkit.runs.page_adapter import page_from_report
from envkit.runs.report import build_report
from envkit.runs.results import load_results

PROJECT = DATA / "page" / "envkit.yaml"  # not there: report.yaml beside it names the goal of `train` (acc ≥ 0.8)


def test_every_row_carries_its_time_to_the_goal_and_the_page_shows_it():
    """Before: page_adapter computed the time to the goal itself, from the runs; the model had none."""
    report = build_report(load_results(DATA / "results" / "commands")[0], config=PROJECT)
    (section,) = report.sections
    assert goal_of(section.facts).text == "acc ≥ 0.8"
    rows = {row.label: row for row in section.rows}
    cpu, cuda = rows["cpu on envkit-cpu:latest"], rows["cuda on envkit-cuda:latest"]
    assert (cpu.goal_reached, cuda.goal_reached) == ((3, 3), (2, 2))  # cuda's failed run is not counted
    assert cpu.time_to_goal.mean == pytest.approx(24.615, abs=5e-4) and cpu.time_to_goal.n == 3
    targets = {target.label: target for target in page_from_report(report, []).comparisons[0].targets}
    assert targets["cpu on envkit-cpu:latest"].time_to_goal == (cpu.time_to_goal.mean, cpu.time_to_goal.std)

"""One environment identity (issue 41 §1): the table's letters, its note and the page's differences group the runs
by report.yaml's environment_facts, and name them alike."""

from __future__ import annotations

from paths import DATA

from envkit.runs.environments import environment_groups
from envkit.runs.page_adapter import page_from_report
from envkit.runs.report import build_report
from envkit.runs.results import load_results


def _report():
    return build_report(load_results(DATA / "results" / "mixed")[0])


def test_the_page_letters_the_environments_the_table_letters_with_the_same_runs():
    """Before: the page grouped by the whole environment JSON, so the cifar section, one environment in its table
    (no env column), showed environments A, B and C on the page, under the same letters the table uses for others."""
    report = _report()
    page = page_from_report(report, [])
    for section, comparison in zip(report.sections, page.comparisons):
        groups = environment_groups(section)
        names = [f"environment {letter} (runs: {', '.join(run.run_name for run in runs)})" for letter, runs in groups]
        assert sorted({name for difference in comparison.differences for name in (difference.a, difference.b)}) == (
            sorted(names)
        )
        for letter, runs in groups:  # a row marked A ran only in A's runs, and every run of A is a marked row's
            marked = [run for row in section.rows if letter in row.mark.split(",") for run in row.results]
            assert set(map(id, runs)) <= set(map(id, marked))
    cifar = next(index for index, section in enumerate(report.sections) if section.recipe == "cifar")
    assert report.sections[cifar].environments == [] and page.comparisons[cifar].differences == ()

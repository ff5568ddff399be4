"""The words around each table (envkit.runs.section_words): carried by the model, the same in every view."""

from __future__ import annotations

import pytest
from paths import DATA

from envkit.runs.formats import SERIES_INTRO, render_report
from envkit.runs.page_adapter import page_from_report
from envkit.runs.report import build_report
from envkit.runs.results import load_results

RESULTS = DATA / "results"


@pytest.mark.parametrize("name", ["backends", "e3", "commands", "mixed"])
def test_markdown_and_the_page_show_the_same_words_and_series_around_each_table(name):
    """Issue 41 §1: before, the markdown and the page each chose a section's words by whether a recipe or a command
    made it: the markdown added "`--strict` refuses to compare them" to the environments' note where the page did
    not, and gave a recipe's series table (E3's curves) only on the page."""
    report = build_report(load_results(RESULTS / name)[0])
    markdown = render_report(report, "md")
    page = page_from_report(report, [])
    for section, comparison in zip(report.sections, page.comparisons, strict=True):
        assert comparison.notes == tuple(section.notes)
        assert comparison.intro == tuple(line for line in section.intro if line)
        assert all(line in markdown for line in (*section.intro, *section.notes))
        for cells in comparison.series_rows:
            assert "| " + " | ".join(cells) + " |" in markdown
    if name == "backends":
        assert any("`--strict` refuses to compare them" in note for note in page.comparisons[1].notes)
    if name == "e3":
        assert page.comparisons[0].series_rows and SERIES_INTRO in markdown

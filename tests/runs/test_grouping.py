"""One grouping of every run into sections and rows (envkit.runs.grouping), whatever kind placed it."""

from __future__ import annotations

from envkit.runs.grouping import Placement, group
from envkit.runs.model import OURS, Row, Section


def _placement(section_key: tuple, row_key: tuple, siblings: str, work: str) -> Placement:
    return Placement(
        section_key=section_key,
        row_key=row_key,
        siblings=siblings,
        work=work,
        section=lambda works: Section(None, None, {}, ["/".join(section_key)], differs=list(dict.fromkeys(works))),
        row=lambda runs, section: Row(
            source=OURS,
            source_short=OURS,
            recipe=None,
            configuration={},
            runs=len(runs),
            total_s=None,
            first_epoch_s=None,
            stats={},
            test_accuracy=None,
            environment=section.title,
            results=tuple(runs),
        ),
    )


def test_runs_group_by_their_section_and_row_keys_in_the_order_they_came():
    placed = [
        ("r1", _placement(("a",), (1,), "x", "w1")),
        ("r2", _placement(("b",), (1,), "x", "w2")),
        ("r3", _placement(("a",), (1,), "x", "w1")),
        ("r4", _placement(("a",), (2,), "y", "w3")),
    ]
    sections = group(placed)
    assert list(sections) == [("a",), ("b",)]
    assert [row.results for row in sections[("a",)].rows] == [("r1", "r3"), ("r4",)]
    assert [row.results for row in sections[("b",)].rows] == [("r2",)]
    # Each row is made with its section, made once from the works of its first run's siblings (each run's).
    assert sections[("a",)].title == "a · w1 · w2" and sections[("a",)].rows[1].environment == "a · w1 · w2"
    assert sections[("b",)].differs == ["w1", "w2"]

"""One grouping of every run into the report's sections and rows (issue 41 §1), a command's and a seed recipe's alike.

Each run is placed (Placement) by what its record holds: the section it belongs to and the row within it, each by
key, the sections whose work its section's title sets it apart from, and how its section and rows are made. A
command's placement is envkit.runs.comparison's (the runs that did the same work, a row per target on its own lock);
a recipe's, envkit.runs.report's (by recipe, dataset, work and configuration, an experiment's runs a row each), whose
configuration, settings and experiment are the recipe's facts the model carries. The grouping itself, and the
differences each title names, are the same for both.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from envkit.runs.model import Row, Section
from envkit.runs.results import RunResult


@dataclass(frozen=True)
class Placement:
    """Where one run goes: its section and its row (keys, in the report's order), the key of the sections whose work
    its section's title names the differences from (``siblings``) and its own ``work``; ``section`` makes its
    section from the works of its siblings (each once per run), ``row`` a row from its runs and its section."""

    section_key: tuple
    row_key: tuple
    siblings: Hashable
    work: Hashable
    section: Callable[[list], Section]
    row: Callable[[list[RunResult], Section], Row]


def group(placed: list[tuple[RunResult, Placement]]) -> dict[tuple, Section]:
    """The sections of the placed runs, keyed for the report's order, each holding its rows (unsorted)."""
    sibling_works: dict[Hashable, list] = {}
    for _, placement in placed:
        sibling_works.setdefault(placement.siblings, []).append(placement.work)
    sections: dict[tuple, Section] = {}
    rows: dict[tuple, dict[tuple, tuple[Placement, list[RunResult]]]] = {}
    for run, placement in placed:
        if placement.section_key not in sections:
            sections[placement.section_key] = placement.section(sibling_works[placement.siblings])
        rows.setdefault(placement.section_key, {}).setdefault(placement.row_key, (placement, []))[1].append(run)
    for key, section in sections.items():
        section.rows = [placement.row(runs, section) for placement, runs in rows[key].values()]
    return sections

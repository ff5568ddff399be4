"""What the HTML page draws, as plain data: the narrow interface between the report's model and the page.

The page (envkit.runs.html_page) knows nothing of how runs are grouped or how cells are formatted: it is
handed comparisons whose table cells the report's own columns already wrote, each target's numbers and
curves (the model's) for the figures, and the environment differences `envkit diff` computed.
envkit.runs.page_adapter builds these from the report; pointing the page at another report model means
writing that one function again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# A target's curve is the report model's own: its mean per step, each run's final value, the first step apart.
from envkit.runs.model import Curve, Goal  # the report model's own

Measure = tuple[float, float]  # (mean, spread: std over the runs)
Interval = tuple[float, float, float]  # (value, low, high): a speed-up and its interval (envkit.runs.speedups)
# One panel of what a comparison measured (report.yaml panels): its axis, and the (column key, legend name) of each
# bar drawn side by side per row.
Panel = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class Target:
    """One row of a comparison's table: a target (and strategy) of ours, or a published row."""

    label: str
    cells: tuple[str, ...]  # the table's cells, as the report formats them (same order as Comparison.headers)
    published: str | None = None  # the published source's label, else None (ours)
    speedup: Interval | None = None
    first_epoch: float | None = None  # seconds: compile and warm-up, apart from the steady state
    steady_epoch: Measure | None = None  # seconds per epoch after the first
    curves: dict[str, Curve] = field(default_factory=dict)  # series name -> its curve
    steps_name: str = "step"  # what the curves' x axis counts (epoch for the seed recipes)
    time_to_goal: Measure | None = None  # seconds until the goal was reached (mean over the runs that reached it)
    goal_reached: tuple[int, int] = (0, 0)  # (runs that reached the goal, runs that recorded its series)
    failed: tuple[str, ...] = ()  # one line per run left out of the numbers: which, and why
    measured: dict[str, Measure] = field(default_factory=dict)  # column key of a panel -> its measure (none: absent)


@dataclass(frozen=True)
class Difference:
    """What differs between two environments of a comparison's runs: `envkit diff`'s sections."""

    a: str  # the environment's name and the runs that ran in it
    b: str
    sections: tuple[tuple[str, str, tuple[str, ...]], ...]  # (title, summary line, its changes)


@dataclass(frozen=True)
class Comparison:
    """One table of the report: the targets that did the same work, side by side."""

    title: str
    intro: tuple[str, ...]  # how the table was made: shown after it, the comparison's result first
    headers: tuple[str, ...]
    targets: tuple[Target, ...]
    notes: tuple[str, ...] = ()  # lines under the table (environments that differ, rows left out)
    speedup_name: str = "speed-up"
    baseline: str | None = None
    goal: Goal | None = None
    differences: tuple[Difference, ...] = ()
    differences_left_out: str | None = None  # why fewer pairs are shown than the comparison has
    series_headers: tuple[str, ...] = ()  # the table of each target's series: final value, a per-step first step apart
    series_rows: tuple[tuple[str, ...], ...] = ()
    series_intro: str = ""  # what the series table's numbers are (formats.SERIES_INTRO)
    in_short: tuple[str, ...] = ()  # the result in a student's words, before the table (speedups.in_short)
    panels: tuple[Panel, ...] = ()  # what its rows measured, drawn as bars (report.yaml panels)


@dataclass(frozen=True)
class Page:
    title: str
    summary: str  # the report's first line: runs, configurations, files skipped
    comparisons: tuple[Comparison, ...]
    skipped: tuple[str, ...] = ()  # files left out of every table, one line each with the reason
    sources: tuple[str, ...] = ()  # the published sources shown beside our rows, each named
    reproduction: str = ""  # the runs' records for envkit reproduce (envkit.runs.page_records), JSON; "" for none
    runs_carried: int = 0  # how many runs it holds

"""The report as plain data: sections of rows, each row the runs of one configuration (or place) measured
here, or a published source's numbers, and the words around each table. envkit.runs.report fills it,
envkit.runs.formats writes it as md, csv or json, envkit.runs.page_adapter makes it the HTML page's data and
envkit.runs.figures draws it: nothing here reads a file or formats a cell.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from envkit.runs.results import Stat, results_schema

DEVICE_ORDER = {"tpu": 0, "cuda": 1, "cpu": 2}
MODE_ORDER = {"single": 0, "none": 0, "dp": 1, "xmp": 2, "spmd": 3, "ddp": 4}
BACKEND_ORDER = results_schema()["properties"]["configuration"]["properties"]["backend"]["enum"]
# The published experiments ran torch_xla: its rows keep their plain names, other backends are named.
UNLABELLED_BACKEND = "torch_xla"
OURS = "ours"  # the source of the rows measured here (the others are published numbers)
# A notebook's runs are rows of their own, named by where they ran and on which packages: the same
# configuration on a runtime's packages and on its lock is the two-notebooks lesson, not one row.
NOTEBOOK_KEY = "notebook"


@dataclass
class Row:
    source: str  # OURS or a published label
    source_short: str  # for plot ticks
    recipe: str | None  # None: a command's runs
    configuration: dict
    runs: int
    total_s: Stat | None
    first_epoch_s: float | None
    stats: dict  # name in STAT_KEYS -> Stat, only those present
    test_accuracy: float | None
    environment: str
    source_rank: int = 0  # published sources keep their order in published.yaml
    # Its device's place in its section's order, set where the row is made: a comparison's places start from the cpu
    # run, its default baseline (comparison_device_rank); a recipe's and a published row's, as published (device_rank).
    device_rank: int = len(DEVICE_ORDER)
    experiment: str | None = None  # the experiment whose run this row is (report.yaml experiments): its own section
    run: str | None = None  # that run's name within the experiment
    run_rank: int = 0  # the run's place in the experiment
    settings: dict = field(default_factory=dict)  # the shown_settings of its runs (one value each: rows split by them)
    speedup: float | None = None
    baseline: str | None = None
    environments: tuple = ()  # the distinct environment_facts of its runs (none for published rows)
    mark: str = ""  # which of its section's environments, when the section holds several
    facts: dict = field(default_factory=dict)  # its section's (section_facts)
    place: str | None = None  # a command's row: where its runs ran (place_of)
    failed: int = 0  # a command's runs that exited with another status than 0 (left out of the statistics)
    wall_time_s: Stat | None = None  # the run wrapper's wall time of the successful runs
    metrics: dict = field(default_factory=dict)  # reported metric name -> Stat over the successful runs reporting it
    # A comparison's row (envkit.runs.comparison): one target's runs on one lock.
    target: str | None = None  # the target it ran on (the record's), else where it ran (place)
    lock: str | None = None  # the lock_sha256 its runs ran on; None: unlocked
    device: str | None = None  # what its runs really initialised, in words (the record's device block)
    # An accelerator target's runs that initialised no accelerator (--allow-cpu, a notebook's CPU mode): no speed-up.
    cpu_stand_in: bool = False
    device_checked: bool = True  # the record says what its runs initialised (a recipe's always does): may be baseline
    # Its speed-up's verdict (envkit.runs.speedups): the ratio's interval (None: a side of one run), "faster",
    # "slower", "no difference shown", "no verdict" or "baseline", the runs on each side, and the baseline's rule.
    speedup_interval: tuple[float, float] | None = None
    verdict: str | None = None
    speedup_runs: tuple[int, int] = (0, 0)
    baseline_rule: str | None = None
    # Why its speed-up is not a result: beyond what its devices could give against the baseline's (speedup_bounds).
    speedup_beyond: str | None = None
    reported: dict = field(default_factory=dict)  # metric -> successful runs that reported it as a finite number
    not_finite: dict = field(default_factory=dict)  # metric -> successful runs that reported it as NaN or ±inf
    curves: dict = field(default_factory=dict)  # series name -> Curve, over its successful runs
    warnings: list[str] = field(default_factory=list)  # what the run wrapper found wrong (a lock that did not run)
    time_to_goal: Stat | None = None  # seconds until its section's goal, over the runs that reached it (goals)
    goal_reached: tuple[int, int] = (0, 0)  # (runs that reached the goal, successful runs that recorded its series)
    results: tuple = ()  # the runs behind it, for the HTML page's differences and goals (none for published rows)

    @property
    def succeeded(self) -> int:
        return self.runs - self.failed

    @property
    def label(self) -> str:
        return self.place or configuration_label(self.configuration)

    def comparable_key(self) -> tuple:
        return (self.source,) + tuple(str(self.configuration.get(key)) for key in self.facts.get("comparable_by", ()))

    def sort_key(self) -> tuple:
        c = self.configuration
        mode = c.get("parallel") if c.get("parallel") not in (None, "none") else c.get("strategy") or "single"
        comparable = tuple(
            str(c.get(key)) if key == "model" else c.get(key) or 0 for key in self.facts.get("comparable_by", ())
        )
        return (
            self.run_rank,
            self.source_rank,
            comparable,
            self.device_rank,
            c.get("world_size") or 1,
            MODE_ORDER.get(mode, 9),
            c.get("nodes") or 1,
            BACKEND_ORDER.index(c.get("backend")),
            self.place or "",
            json.dumps([c, self.settings], sort_keys=True),  # last: never a tie, whatever the file order
        )


# The most metric columns a table of the markdown report and the page shows; csv and json list every one.
SHOWN_METRICS = 16
SHOWN_ROWS = 50  # rows a table of the markdown report and the page shows, likewise
# The largest magnitude a figure draws: matplotlib's axis arithmetic overflows near float's limit (a series holding
# 1.7e308 raised "arange: cannot compute length"), so a value past it, or not finite, is left out of the drawing.
DRAWN_LIMIT = 1e300


def drawn_value(value: float) -> float:
    """``value`` as a figure draws it: NaN (matplotlib leaves a gap) where it is not finite or past DRAWN_LIMIT."""
    return value if math.isfinite(value) and abs(value) <= DRAWN_LIMIT else math.nan


def device_rank(configuration: dict) -> int:
    """A recipe's or a published row's device in the published tables' order: TPU, CUDA, CPU, then any other."""
    return DEVICE_ORDER.get(configuration.get("device"), len(DEVICE_ORDER))


def comparison_device_rank(configuration: dict) -> int:
    """A comparison's row: the cpu first, its default baseline (envkit.runs.speedups), then every other device."""
    return int(configuration.get("device") != "cpu")


@dataclass(frozen=True)
class Curve:
    """One series of a row's runs (dvclive's plots/metrics/<name>.tsv, a seed recipe's per-epoch lists): the mean
    value per step over the runs that reached it, at most a bounded number of points (every ``stride``-th step); each
    run's final value over the runs; and a per-step series' first step apart (compilation and warm-up show there: a
    recipe's first epoch is timed apart instead, and its first value is a whole epoch's)."""

    steps: tuple[int, ...]
    values: tuple[float, ...]
    runs: int  # the runs that wrote the series
    first: Stat  # the first step's value over those runs
    final: Stat  # each run's last value, mean ± std across the runs (not over the steps of a curve still moving)
    stride: int = 1  # >1: the curve keeps every stride-th step of a longer series
    per_step: bool = True  # False: a seed recipe's per-epoch list
    not_finite: int = 0  # values the runs logged as NaN or ±inf: counted, left out of every mean

    @property
    def unit(self) -> str:
        return "step" if self.per_step else "epoch"


def identical(curves: list[Curve | None]) -> list[int | None]:
    """For each curve, the index of an earlier one it repeats point for point (None: its own): two targets'
    identical curves would draw as one line, so the figures tell them apart and say so."""
    seen: dict[tuple, int] = {}
    repeats: list[int | None] = []
    for index, curve in enumerate(curves):
        key = None if curve is None else (curve.steps, curve.values)
        repeats.append(seen.get(key) if key is not None else None)
        if key is not None:
            seen.setdefault(key, index)
    return repeats


def identical_groups(labels: list[str], repeats: list[int | None]) -> list[str]:
    """'a and b' for each group of curves that repeat one another (``repeats``: identical's), named by ``labels``."""
    groups: dict[int, list[str]] = {}
    for index, first in enumerate(repeats):
        if first is not None:
            groups.setdefault(first, [labels[first]]).append(labels[index])
    return [" and ".join(names) for names in groups.values()]


# Line styles and markers for the curves of several targets, so that identical curves stay apart.
LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "x")


@dataclass(frozen=True)
class Goal:
    metric: str
    value: float
    at_most: bool = False  # reached when the metric falls to the value (a loss), else when it rises to it

    @property
    def text(self) -> str:
        return f"{self.metric} {'≤' if self.at_most else '≥'} {self.value:g}"


@dataclass
class Section:
    recipe: str | None  # None: a command's experiment
    dataset: str | None  # None: a command's (the program's data is its own)
    facts: dict
    # What it is, before its differences, as its grouping named it: a comparison's title (report.yaml's, else
    # "experiment NAME"); a recipe's name or its experiment's title, and its dataset.
    heading: list[str]
    rows: list[Row] = field(default_factory=list)
    environments: list[tuple] = field(default_factory=list)  # set only when its measured rows differ
    experiment: str | None = None  # an experiment's section (report.yaml experiments), else the recipe's
    run_summaries: dict[str, str] = field(default_factory=dict)  # an experiment's: its runs' summaries by label
    apart: str | None = None  # published rows alone: why they are compared with none of the runs measured here
    # A comparison (a command's runs that did the same work, envkit.runs.comparison): what its runs share (arguments,
    # data), and how it differs from the experiment's other comparisons (empty: the experiment has one); a recipe's
    # section: how its work (epochs, step cap, train images) differs from its recipe and dataset's other sections.
    work: dict = field(default_factory=dict)
    differs: list[str] = field(default_factory=list)
    # A recipe's own section: published rows of the same work join it (--reference), and its table names each row's
    # source (envkit.runs.report).
    takes_published: bool = False
    # The words around its table, the same in every view (envkit.runs.section_words): the lines before it, the notes
    # under it.
    intro: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        title = " · ".join([*self.heading, *self.differs])
        return title + (" · published, compared with no run here" if self.apart else "")

    @property
    def metric_names(self) -> list[str]:
        """Every metric its rows report, sorted."""
        return sorted({name for row in self.rows for name in (*row.metrics, *row.not_finite)})

    @property
    def shown_rows(self) -> list[Row]:
        """The rows a table of this section shows: the first SHOWN_ROWS in its order, each one's baseline kept (a
        results folder may hold thousands of targets or locks; csv and json list every row)."""
        if len(self.rows) <= SHOWN_ROWS:
            return self.rows
        shown = self.rows[:SHOWN_ROWS]
        bases = {row.baseline for row in shown if row.baseline}
        missing = [row for row in self.rows[SHOWN_ROWS:] if row.label in bases]
        return shown[: SHOWN_ROWS - len(missing)] + missing

    @property
    def shown_metric_names(self) -> list[str]:
        """The metrics a table of this section shows, sorted: at most SHOWN_METRICS, those the most runs reported
        (a program may name a metric per step or per run: 5,000 runs of 20 such names made a 10.9 MB page)."""
        names = self.metric_names
        if len(names) <= SHOWN_METRICS:
            return names
        runs = {name: sum(row.reported.get(name, 0) for row in self.rows) for name in names}
        return sorted(sorted(names, key=lambda name: (-runs[name], name))[:SHOWN_METRICS])

    @property
    def series_names(self) -> list[str]:
        """Every series its rows drew, sorted."""
        return sorted({name for row in self.rows for name in row.curves})


@dataclass
class Report:
    sections: list[Section]
    runs: int
    skipped: int
    baseline_rule: str
    reference: bool
    copies: int = 0  # records that repeat another's run name and start: counted once
    warnings: list[str] = field(default_factory=list)  # what the reader should know: each copy, each NaN reported
    baseline: str | None = None  # the row label --baseline names


def configuration_label(configuration: dict) -> str:
    """Short name of a configuration: the device, how the work is spread, and the backend and nodes where they
    say more."""
    device = configuration.get("device")
    size = configuration.get("world_size") or configuration.get("cores") or 1
    parallel = configuration.get("parallel")
    strategy = configuration.get("strategy")
    if parallel == "dp":
        mode = f"DP×{size}"
    elif parallel == "ddp":
        mode = f"DDP×{size}"
    elif strategy == "xmp":
        mode = f"xmp×{configuration.get('cores') or size}"
    elif strategy == "spmd":
        mode = f"SPMD×{configuration.get('cores') or size}"
    else:
        mode = f"×{size}"
    extras = []
    if configuration.get("backend") not in (None, UNLABELLED_BACKEND):
        extras.append(configuration["backend"])
    if (configuration.get("nodes") or 1) > 1:
        extras.append(f"{configuration['nodes']} nodes")
    if configuration.get(NOTEBOOK_KEY):
        extras.append(configuration[NOTEBOOK_KEY])
    return f"{device} {mode}" + (f" ({', '.join(extras)})" if extras else "")


def notebook_label(notebook: dict) -> str:
    """'colab v5e-1, lock' or 'kaggle TpuV5E8, runtime packages' (CPU mode says so)."""
    where = f"{notebook['platform']} {notebook['accelerator']}" + (" CPU mode" if notebook.get("cpu_mode") else "")
    return f"{where}, {'lock' if notebook['packages'] == 'lock' else 'runtime packages'}"

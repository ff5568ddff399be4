"""The page's data (envkit.runs.page_model) from the report's model: the one place that knows both.

One comparison per report section (envkit.runs.comparison groups a command's runs, envkit.runs.report a
recipe's): the table's cells are the report's own columns, the speed-up and its interval the model's
(envkit.runs.speedups, as markdown, csv and json give them), the curves the model's (Row.curves: each run's
final value, a per-step series' first step apart), the lines around the table the model's (Section.intro and
notes, envkit.runs.section_words: the markdown report shows the same), its series table for every section. What the
model does not hold is found here: the environment differences come from `envkit diff`'s comparison
(envkit.image.diff over each run's inventory); the time to reach report.yaml's ``goal`` is the model's too
(envkit.runs.goals). Its comparisons are also what `envkit report --plot` draws (envkit.runs.plot): one set of
figures (envkit.runs.figures) for the page and the PNG.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.image.diff import compare, dict_changes, format_sections
from envkit.image.inventory import from_environment
from envkit.runs.columns import METRICS, column_of, counted
from envkit.runs.environments import environment_groups
from envkit.runs.figures import MAX_SECTIONS
from envkit.runs.formats import SERIES_HEADERS, SERIES_INTRO, markdown_columns, section_headers, series_rows
from envkit.runs.goals import goal_of
from envkit.runs.html_page import write_page
from envkit.runs.model import OURS, Report, Row, Section
from envkit.runs.page_model import Comparison, Difference, Interval, Page, Panel, Target
from envkit.runs.page_records import page_data
from envkit.runs.speedups import baseline_text, in_short

# What a run recorded about where it ran that an inventory does not hold: compared the way `envkit diff` compares.
RUN_FACTS = (
    "host",
    "device_type",
    "device_name",
    "device_count",
    "image",
    "image_id",
    "image_digest",
    "git_revision",
    "git_dirty",
)
ALL_PAIRS = 5  # up to this many environments every pair is shown; beyond, each against the first


def _speedup(row: Row) -> Interval | None:
    """The row's speed-up with its interval (envkit.runs.speedups, as every format gives it): (ratio, low, high),
    the ratio itself at both ends where no interval exists; none where it is beyond the devices used (not a
    result)."""
    if row.speedup is None or row.speedup_beyond is not None:
        return None
    low, high = row.speedup_interval or (row.speedup, row.speedup)
    return row.speedup, low, high


def _left_out(row: Row) -> tuple[str, ...]:
    """One line per run left out of the row's numbers (a failed run, with its exit status and its stderr's last
    line), or of the speed-ups (a CPU run of an accelerator's target)."""
    lines = []
    for run in row.results:
        if not run.succeeded:
            tail = [line for line in run.run.get("stderr_tail") or () if isinstance(line, str) and line.strip()]
            reason = f" (stderr: {tail[-1].strip()})" if tail else ""
            lines.append(f"{run.run_name}: {run.outcome}{reason}, left out of the numbers")
        elif row.cpu_stand_in:
            lines.append(
                f"{run.run_name}: ran on {row.target} but initialised no accelerator ({row.device}); "
                "a CPU run, left out of the speed-ups"
            )
    if row.speedup_beyond is not None:
        lines.append(f"speed-up {row.speedup:.2f}× {row.speedup_beyond}: left out of the speed-up figure")
    return tuple(lines)


def _label(row: Row) -> str:
    """The row's name in figures, as the PNG plot's ticks name it: its run, the facts its section's tick
    names (a model and batch), and a published source."""
    label = row.label if row.run is None else f"{row.run}: {row.label}"
    tick = row.facts.get("tick")
    if tick:
        label += ", " + tick.format(**row.configuration, **row.settings).replace("\n", ", ")
    return label if row.source == OURS else f"{label} (published: {row.source_short})"


def _target(row: Row, columns: list, drawn: bool, keys: set[str]) -> Target:
    """The row's cells as the report writes them, its speed-up with its interval, its measure of each of the
    panels' columns (``keys``); ``drawn``: its comparison gets figures (figures.MAX_SECTIONS)."""
    steady = row.stats.get("steady_epoch_s")
    return Target(
        label=_label(row),
        cells=tuple(column.cell(row) for column in columns),
        published=None if row.source == OURS else row.source,
        speedup=_speedup(row),
        first_epoch=row.first_epoch_s,
        steady_epoch=(steady.mean, steady.std) if steady else None,
        curves=dict(row.curves) if drawn else {},
        steps_name=next((curve.unit for curve in row.curves.values()), "step"),
        time_to_goal=(row.time_to_goal.mean, row.time_to_goal.std) if row.time_to_goal else None,
        goal_reached=row.goal_reached,
        failed=_left_out(row),
        measured={key: measure for key in sorted(keys) if (measure := column_of(key).measure(row)) is not None},
    )


def _differences(section: Section) -> tuple[tuple[Difference, ...], str | None]:
    """`envkit diff` between the environments the section's table letters (environments.environment_groups: the
    same letters and runs), each by its first run's record."""
    environments = [
        (f"environment {letter} (runs: {_listed([run.run_name for run in runs])})", runs[0].environment)
        for letter, runs in environment_groups(section)
    ]
    inventories = {name: from_environment(name, environment) for name, environment in environments}
    pairs = list(combinations(environments, 2))
    left_out = None
    if len(environments) > ALL_PAIRS:
        pairs = [(environments[0], other) for other in environments[1:]]
        left_out = f"{len(environments)} environments: each is compared with the first, not every pair"
    differences = []
    for (a_name, a), (b_name, b) in pairs:
        pair = inventories[a_name], inventories[b_name]
        rows = []
        for compared in compare(*pair):
            if compared.unknown is None:  # a results file records no apt packages, labels or base digest
                lines = format_sections([compared], *pair).splitlines()[2:]
                rows.append((compared.title, lines[0], tuple(line.strip() for line in lines[1:])))
        facts = dict_changes(*({key: _text(side.get(key)) for key in RUN_FACTS} for side in (a, b)))
        summary = f"{len(facts)} of {len(RUN_FACTS)} differ" if facts else f"same ({len(RUN_FACTS)})"
        rows.append(("where it ran", f"where it ran: {summary}", facts))
        differences.append(Difference(a_name, b_name, tuple(rows)))
    return tuple(differences), left_out


def _listed(names: list[str], shown: int = 8) -> str:
    return ", ".join(names) if len(names) <= shown else f"{', '.join(names[:shown])} and {len(names) - shown} more"


def _text(value) -> str | None:
    return None if value is None else str(value)


def panels(section: Section) -> tuple[Panel, ...]:
    """What the section's rows measured, as figures draw it: per report.yaml panel (``metrics``: one per metric its
    rows reported) its axis and the (column, legend name) of the bars drawn side by side per row."""
    drawn = []
    for panel in section.facts["panels"]:
        drawn += [[f"{METRICS}.{name}"] for name in section.metric_names] if panel == METRICS else [panel]
    return tuple((column_of(keys[0]).axis, tuple((key, column_of(key).short_name) for key in keys)) for keys in drawn)


def comparison_of(section: Section, report: Report, drawn: bool) -> Comparison:
    """The section as the page shows it and the figures draw it (without `envkit diff`'s differences, which only
    the page shows); ``drawn``: its comparison gets figures (figures.MAX_SECTIONS)."""
    columns = markdown_columns(section, report.reference)
    drawn_panels = panels(section)
    keys = {key for _, bars in drawn_panels for key, _ in bars}
    return Comparison(
        title=section.title,
        intro=tuple(line for line in section.intro if line),
        headers=tuple(section_headers(section, columns)),
        targets=tuple(_target(row, columns, drawn, keys) for row in section.shown_rows),
        notes=tuple(section.notes),
        speedup_name=section.facts.get("speedup", {}).get("name", ""),
        baseline=baseline_text(section.rows, report.baseline),
        goal=goal_of(section.facts),
        series_headers=SERIES_HEADERS,
        series_rows=tuple(tuple(cells) for cells in series_rows(section)),
        series_intro=SERIES_INTRO,
        in_short=tuple(in_short(section.rows)),
        panels=drawn_panels,
    )


def page_from_report(report: Report, warnings: list[str], remote: str | None = None) -> Page:
    """The page of ``report`` (built with its runs), with the files the report skipped (``warnings``) and the
    clone's origin (``remote``) among the runs' records it carries."""
    comparisons = []
    for index, section in enumerate(report.sections):
        differences, left_out = _differences(section)
        comparison = comparison_of(section, report, index < MAX_SECTIONS)
        comparisons.append(replace(comparison, differences=differences, differences_left_out=left_out))
    configurations = sum(1 for section in report.sections for row in section.rows if row.source == OURS)
    summary = f"{counted(report.runs, 'run')} in {counted(configurations, 'configuration')}"
    skipped = tuple(line.removeprefix("skipped ") for line in warnings if line.startswith("skipped "))
    sources = {row.source: row.environment for s in report.sections for row in s.rows if row.source != OURS}
    carried = [run for s in report.sections for row in s.rows for run in row.results if run.run is not None]
    return Page(
        title="envkit comparison report",
        summary=summary + (f"; {counted(len(skipped), 'file')} skipped" if skipped else "") + ".",
        comparisons=tuple(comparisons),
        skipped=skipped,
        sources=tuple(f"{label}: {note}" for label, note in sources.items()),
        reproduction=page_data(carried, remote),
        runs_carried=len({str(run.path) for run in carried}),
    )


def write_report_page(report: Report, warnings: list[str], path: Path, remote: str | None = None) -> int:
    """`envkit report --html`: the page of ``report`` written atomically to ``path``; its size in bytes.
    A path it cannot write is one line (EnvkitError)."""
    try:
        return write_page(page_from_report(report, warnings, remote), path)
    except OSError as exc:
        raise EnvkitError(f"cannot write the page {path}: {exc.strerror or exc}") from None

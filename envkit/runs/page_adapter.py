"""The page's data (envkit.runs.page_model) from the report's model: the one place that knows both.

The tables' cells come from the report's own columns, the environment differences from `envkit diff`'s
comparison (envkit.image.diff over each run's inventory). The report keeps no series, so the runs'
curves are read from their files here: a command's ``series`` (dvclive's), a seed recipe's per-epoch
``epoch_loss`` and ``epoch_test_accuracy``.
"""

from __future__ import annotations

import json
import math
from itertools import combinations
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.image.diff import compare, dict_changes, format_sections
from envkit.image.inventory import from_environment
from envkit.runs import formats, model
from envkit.runs.columns import counted
from envkit.runs.environments import environment_letter, environments_text
from envkit.runs.html_page import MAX_FIGURE_COMPARISONS, write_page
from envkit.runs.page_model import Comparison, Curve, Difference, Goal, Measure, Page, Target
from envkit.runs.results import RunResult, Stat

# A seed recipe's per-epoch lists (its metrics), by the name of the metric they end at.
RECIPE_SERIES = {"epoch_loss": "loss", "epoch_test_accuracy": "test_accuracy"}
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


def _series(run: RunResult) -> dict[str, tuple[list[float], list[float]]]:
    # The report's loader read this file within its bounds and validated it a moment ago; one that has
    # gone or changed since then just draws no curve.
    try:
        document = json.loads(run.path.read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(document, dict):
        return {}
    if run.recipe is not None:
        metrics = document.get("metrics") or {}
        return {
            name: (list(range(1, len(metrics[key]) + 1)), metrics[key])
            for key, name in RECIPE_SERIES.items()
            if isinstance(metrics.get(key), list) and metrics[key]
        }
    return {name: (entry["step"], entry["value"]) for name, entry in (document.get("series") or {}).items()}


def _curves(series: list[dict[str, tuple[list[float], list[float]]]]) -> dict[str, Curve]:
    """Per series name, the mean and std over the runs at each step any of them recorded."""
    curves = {}
    for name in sorted({name for one in series for name in one}):
        recorded = [one[name] for one in series if name in one]
        if all(steps == recorded[0][0] for steps, _ in recorded):  # the usual case: every run logged the same steps
            columns = list(zip(*(values for _, values in recorded)))
            means = [sum(column) / len(column) for column in columns]
            stds = [math.sqrt(sum((v - m) ** 2 for v in c) / len(c)) for c, m in zip(columns, means)]
            curves[name] = Curve(tuple(recorded[0][0]), tuple(means), tuple(stds), len(recorded))
            continue
        by_step: dict[float, list[float]] = {}
        for one in series:
            for step, value in zip(*one.get(name, ((), ()))):
                by_step.setdefault(step, []).append(value)
        steps = sorted(by_step)
        means = [sum(by_step[s]) / len(by_step[s]) for s in steps]
        stds = [math.sqrt(sum((v - m) ** 2 for v in by_step[s]) / len(by_step[s])) for s, m in zip(steps, means)]
        curves[name] = Curve(tuple(steps), tuple(means), tuple(stds), sum(1 for one in series if name in one))
    return curves


def _reached(goal: Goal, steps: list[float], values: list[float]) -> int | None:
    """The index of the first point that meets the goal."""
    return next(
        (i for i, value in enumerate(values) if (value <= goal.value if goal.at_most else value >= goal.value)), None
    )


def _time_to_goal(goal: Goal, runs: list[RunResult], series: list[dict]) -> tuple[Measure | None, tuple[int, int]]:
    """Seconds until the goal per run: a recipe's first epoch plus its later epochs' mean each; a command's
    wall time in proportion to the steps (steps taken as equally long)."""
    times = []
    recorded = 0
    for run, one in zip(runs, series):
        if goal.metric not in one:
            continue
        recorded += 1
        steps, values = one[goal.metric]
        index = _reached(goal, steps, values)
        if index is None:
            continue
        if run.recipe is not None:
            steady = run.timing.get("steady_epoch_s")
            times.append(run.timing["first_epoch_s"] + index * (steady.mean if steady else 0.0))
        elif run.run is not None:
            times.append(run.run["wall_time_s"] * (index + 1) / len(values))
    if not times:
        return None, (0, recorded)
    mean = sum(times) / len(times)
    return (mean, math.sqrt(sum((t - mean) ** 2 for t in times) / len(times))), (len(times), recorded)


def _measured(row: model.Row, name: str | None) -> Stat | None:
    return {"total_s": row.total_s, "wall_time_s": row.wall_time_s}.get(name) or row.stats.get(name)


def _speedup(row: model.Row, section: model.Section) -> Measure | None:
    """The row's speed-up with the spread of the ratio: both sides' relative std, propagated."""
    if row.speedup is None:
        return None
    base = next(r for r in section.rows if r.label == row.baseline and r.comparable_key() == row.comparable_key())
    if base is row:  # the baseline against itself: 1 exactly
        return row.speedup, 0.0
    facts = row.facts["speedup"]
    spreads = []
    for side in (base, row):
        stat = _measured(side, facts["metric"]) or _measured(side, facts.get("fallback"))
        spreads.append(stat.std / stat.mean if stat and stat.mean else 0.0)
    return row.speedup, row.speedup * math.hypot(*spreads)


def _failed(row: model.Row) -> tuple[str, ...]:
    return tuple(
        f"{run.run_name}: exit status {run.run['exit_status']}, left out of the numbers"
        for run in row.results
        if not run.succeeded
    )


def _label(row: model.Row) -> str:
    """The row's name in figures, as the PNG plot's ticks name it: its run, the facts its section's tick
    names (a model and batch), and a published source."""
    label = row.label if row.run is None else f"{row.run}: {row.label}"
    tick = row.facts.get("tick")
    if tick:
        label += ", " + tick.format(**row.configuration, **row.settings).replace("\n", ", ")
    return label if row.source == model.OURS else f"{label} (published: {row.source_short})"


def _target(row: model.Row, section: model.Section, columns: list, goal: Goal | None, drawn: bool) -> Target:
    """The row's cells as the report writes them, its speed-up with its spread; ``drawn``: its comparison gets
    figures (html_page.MAX_FIGURE_COMPARISONS), so its series are read."""
    series = [_series(run) for run in row.results] if drawn or goal else []
    time_to_goal, reached = _time_to_goal(goal, list(row.results), series) if goal else (None, (0, 0))
    steady = row.stats.get("steady_epoch_s")
    speedup = _speedup(row, section)
    spread = f" ± {speedup[1]:.2f}" if speedup and speedup[1] > 0 else ""
    return Target(
        label=_label(row),
        cells=tuple(column.cell(row) + (spread if column.key == "speedup" else "") for column in columns),
        published=None if row.source == model.OURS else row.source,
        speedup=speedup,
        first_epoch=row.first_epoch_s,
        steady_epoch=(steady.mean, steady.std) if steady else None,
        curves=_curves(series),
        steps_name="step" if row.recipe is None else "epoch",
        time_to_goal=time_to_goal,
        goal_reached=reached,
        failed=_failed(row),
    )


def _differences(section: model.Section) -> tuple[tuple[Difference, ...], str | None]:
    """`envkit diff` between the distinct environments the section's runs recorded."""
    named: dict[str, tuple[dict, list[str]]] = {}
    for row in section.rows:
        for run in row.results:
            key = json.dumps(run.environment, sort_keys=True, default=str)
            named.setdefault(key, (run.environment, []))[1].append(run.run_name)
    environments = [
        (f"environment {environment_letter(i)} (runs: {_listed(runs)})", environment)
        for i, (environment, runs) in enumerate(named.values())
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


def _intro(section: model.Section, report: model.Report) -> tuple[str, ...]:
    if section.recipe is None:
        lines = formats._command_intro(section, report)
    elif section.experiment:
        lines = formats._experiment_intro(section)
    else:
        lines = formats._recipe_intro(section, report)
    return tuple(line for line in lines if line)


def _goal(facts: dict) -> Goal | None:
    goal = facts.get("goal")
    return Goal(goal["metric"], float(goal["value"]), goal.get("at_most", False)) if goal else None


def page_from_report(report: model.Report, warnings: list[str]) -> Page:
    """The page of ``report`` (built with its runs), with the files the report skipped (``warnings``)."""
    comparisons = []
    for index, section in enumerate(report.sections):
        columns = formats.markdown_columns(section, report.reference)
        speedup_name = section.facts.get("speedup", {}).get("name", "")
        goal = _goal(section.facts)
        targets = tuple(_target(row, section, columns, goal, index < MAX_FIGURE_COMPARISONS) for row in section.rows)
        differences, left_out = _differences(section)
        comparisons.append(
            Comparison(
                title=section.title,
                intro=_intro(section, report),
                headers=tuple(column.header.format(speedup=speedup_name) for column in columns),
                targets=targets,
                notes=(f"env: these rows ran in {environments_text(section)}.",) if section.environments else (),
                speedup_name=speedup_name,
                baseline=next((row.baseline for row in section.rows if row.baseline), None),
                goal=goal,
                differences=differences,
                differences_left_out=left_out,
            )
        )
    configurations = sum(1 for section in report.sections for row in section.rows if row.source == model.OURS)
    summary = f"{counted(report.runs, 'run')} in {counted(configurations, 'configuration')}"
    skipped = tuple(line.removeprefix("skipped ") for line in warnings if line.startswith("skipped "))
    sources = {row.source: row.environment for s in report.sections for row in s.rows if row.source != model.OURS}
    return Page(
        title="envkit comparison report",
        summary=summary + (f"; {counted(len(skipped), 'file')} skipped" if skipped else "") + ".",
        comparisons=tuple(comparisons),
        skipped=skipped,
        sources=tuple(f"{label}: {note}" for label, note in sources.items()),
    )


def write_report_page(report: model.Report, warnings: list[str], path: Path) -> int:
    """`envkit report --html`: the page of ``report`` written atomically to ``path``; its size in bytes.
    A path it cannot write is one line (EnvkitError)."""
    try:
        return write_page(page_from_report(report, warnings), path)
    except OSError as exc:
        raise EnvkitError(f"cannot write the page {path}: {exc.strerror or exc}") from None

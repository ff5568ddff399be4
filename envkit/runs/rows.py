"""One row of runs measured here (issue 41 §1), a command's and a seed recipe's alike: one builder, measured_row.

Both kinds of record share a core (envkit.runs.results.RunResult): the program's metrics, its series, the run
wrapper's block where it started the run (exit status, wall time, warnings) and the environment. A seed recipe's
record adds its timing (total, first epoch, the per-epoch statistics), which a command's lacks: the same builder pools
it where the runs have it, so a command's row simply has none. Every number is over the row's successful runs (a
failed one is counted, left out); what the grouping knows of the row before its numbers (its configuration, where it
ran, its lock, an experiment's run) is given by its placement (envkit.runs.comparison's, envkit.runs.report's).
"""

from __future__ import annotations

import json
import math

from envkit.runs.environments import cpu_stand_in, environment_facts, environment_line
from envkit.runs.model import OURS, Curve, Row
from envkit.runs.published import report_facts
from envkit.runs.results import RunResult, Stat, stat_of

# A curve keeps at most this many points: a plot and a page stay small whatever a series' length.
CURVE_POINTS = 200


def pooled(stats: list[Stat]) -> Stat:
    """Mean and population std over all samples behind several (mean, std, n)."""
    total = sum(s.n for s in stats)
    mean = sum(s.mean * s.n for s in stats) / total
    variance = sum(s.n * (s.std**2 + (s.mean - mean) ** 2) for s in stats) / total
    return Stat(mean, math.sqrt(variance), total)


def _stat(values: list[float]) -> Stat | None:
    return Stat(**stat_of(values)) if values else None


def is_counter(name: str) -> bool:
    """A counter the program logs beside its metrics (dvclive's ``step``), by its last name part."""
    return name.rsplit(".", 1)[-1] in report_facts()["counters"]


def _curve(runs: list[RunResult], name: str) -> Curve | None:
    """The mean curve of series ``name`` over ``runs`` (those that wrote it), bounded to CURVE_POINTS points."""
    written = [run.series[name] for run in runs if run.series.get(name, {}).get("step")]
    return mean_curve(written, per_step=all(run.recipe is None for run in runs))


def curves_of(runs: list[RunResult]) -> dict[str, Curve]:
    """The mean curve of each series ``runs`` wrote (counters are not series), by name: a command's row's and a
    recipe's alike."""
    names = sorted({name for run in runs for name in run.series if not is_counter(name)})
    curves = {name: _curve(runs, name) for name in names}
    return {name: curve for name, curve in curves.items() if curve is not None}


def mean_curve(written: list[dict], per_step: bool = True) -> Curve | None:
    """The mean curve of one series as several runs wrote it (each {"step": [...], "value": [...]}), bounded to
    CURVE_POINTS points, with each run's final value; None where none wrote it. ``per_step``: False for a seed
    recipe's per-epoch lists."""
    if not written:
        return None
    # A NaN or inf a run logged (a loss that diverged) is counted and said, and left out of every mean: a mean
    # over it read "nan ± nan" with no word.
    by_step: dict[int, list[float]] = {}
    not_finite = 0
    for series in written:
        for step, value in zip(series["step"], series["value"]):
            if math.isfinite(value):
                by_step.setdefault(step, []).append(value)
            else:
                by_step.setdefault(step, [])
                not_finite += 1
    steps = sorted(by_step)
    stride = max(1, math.ceil(len(steps) / CURVE_POINTS))
    kept = steps[::stride]
    return Curve(
        steps=tuple(kept),
        values=tuple(sum(by_step[step]) / len(by_step[step]) if by_step[step] else math.nan for step in kept),
        runs=len(written),
        first=_finite_stat([series["value"][0] for series in written]),
        final=_finite_stat([series["value"][-1] for series in written]),
        stride=stride,
        per_step=per_step,
        not_finite=not_finite,
    )


def _finite_stat(values: list[float]) -> Stat:
    """The runs' values as mean ± std over the finite ones (NaN where none is: the cell says how many were not)."""
    finite = [value for value in values if math.isfinite(value)]
    return Stat(**stat_of(finite)) if finite else Stat(math.nan, math.nan, 0)


def _metrics(done: list[RunResult]) -> dict:
    """The metrics the programs of the successful runs ``done`` reported (counters are not metrics): each one's
    mean ± std, how many runs reported it as a finite number, how many as NaN or ±inf."""
    # One pass over the runs: 5,000 runs of 20 metrics each, all named apart, made name x run 500 million steps.
    values: dict[str, list[float]] = {}
    not_finite: dict[str, int] = {}
    for run in done:
        metrics, unusable = run.program_metrics
        for name, value in metrics.items():
            values.setdefault(name, []).append(value)
        for name in unusable:
            not_finite[name] = not_finite.get(name, 0) + 1
    names = sorted(name for name in {*values, *not_finite} if not is_counter(name))
    return dict(
        metrics={name: stat for name in names if (stat := _stat(values.get(name, []))) is not None},
        reported={name: len(values.get(name, ())) for name in names},
        not_finite={name: not_finite[name] for name in names if name in not_finite},
    )


def _timing(done: list[RunResult]) -> dict:
    """A seed recipe's timing over the successful runs ``done``: total and first epoch, each per-epoch statistic
    pooled over all their epochs (one only some runs recorded would describe a subset: left out), the test accuracy's
    mean over the runs that reached a finite one; None and {} where the records hold none (a command's)."""
    timed = [run for run in done if "total_s" in run.timing]
    names = sorted({name for run in timed for name, value in run.timing.items() if isinstance(value, Stat)})
    stats = {
        name: pooled([run.timing[name] for run in timed]) for name in names if all(name in run.timing for run in timed)
    }
    accuracies = [
        run.test_accuracy for run in done if run.test_accuracy is not None and math.isfinite(run.test_accuracy)
    ]
    return dict(
        total_s=_stat([run.timing["total_s"] for run in timed]),
        first_epoch_s=sum(run.timing["first_epoch_s"] for run in timed) / len(timed) if timed else None,
        stats=stats,
        test_accuracy=sum(accuracies) / len(accuracies) if accuracies else None,
    )


def measured_row(runs: list[RunResult], facts: dict, **given) -> Row:
    """The row of ``runs`` in a section of ``facts``: every number over its successful runs, its environments and
    curves, the run wrapper's warnings. ``given``: what its placement knows of it (its configuration and device rank,
    the recipe, where it ran, its lock, an experiment's run); a row split by lock (``lock`` given) shows it in its
    lock column, not in its environment line."""
    done = [run for run in runs if run.succeeded]
    environments = sorted({environment_line(run.environment, with_lock="lock" not in given) for run in runs})
    return Row(
        source=OURS,
        source_short=OURS,
        runs=len(runs),
        environment=environments[0] if len(environments) == 1 else "mixed: " + "; ".join(environments),
        environments=tuple(sorted({environment_facts(run) for run in runs}, key=json.dumps)),
        facts=facts,
        failed=len(runs) - len(done),
        wall_time_s=_stat([run.run["wall_time_s"] for run in done if run.run]),
        curves=curves_of(done),
        warnings=sorted(
            {warning for run in runs for warning in (run.run or {}).get("warnings") or () if isinstance(warning, str)}
        ),
        results=tuple(runs),
        # A run of an accelerator's target that initialised none, or a notebook's in CPU mode: never in a speed-up.
        cpu_stand_in=any(cpu_stand_in(run) for run in runs),
        **_timing(done),
        **_metrics(done),
        **given,
    )

"""The report's columns, one registry: each column's markdown header and cell, and its csv/json keys and values.

Every column is one entry of COLUMNS, or one reported metric (``metrics.<name>``, metric_column). Cells are
formatted with fixed precision, so the same rows always give the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envkit.runs.model import OURS, Row, Section
from envkit.runs.results import Stat
from envkit.runs.speedups import verdict_text

NOT_APPLICABLE = "–"
LOCK_DIGITS = 12  # a lock's sha256 is told apart by its first 12 digits, like an image ID
# In report.yaml's columns and panels: every metric the section's runs reported (a panel each in the plot).
METRICS = "metrics"


def counted(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def words_and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _seconds(value: float | None, digits: int = 3) -> str:
    return NOT_APPLICABLE if value is None else f"{value:.{digits}f}"


def _mean_std(stat: Stat | None, digits: int = 3) -> str:
    if stat is None:
        return NOT_APPLICABLE
    if stat.n == 1:  # one sample has no spread worth printing
        return f"{stat.mean:.{digits}f}"
    return f"{stat.mean:.{digits}f} ± {stat.std:.{digits}f}"


def _accuracy(value: float | None) -> str:
    return NOT_APPLICABLE if value is None else f"{100 * value:.2f}%"


def _optional(value) -> str:
    return NOT_APPLICABLE if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _speedup_cell(row: Row) -> str:
    if row.speedup is None:
        return NOT_APPLICABLE
    if row.speedup_beyond is not None:  # the ratio measured, never as a result
        return f"{row.speedup:.2f}× ({row.speedup_beyond})"
    return f"{row.speedup:.2f}× {verdict_text(row)}"


def _verdict_flat(row: Row) -> tuple:
    """The speed-up's interval and verdict (null where the row has no speed-up, or it is not a result)."""
    if row.speedup is None or row.speedup_beyond is not None:
        return None, None, None
    low, high = row.speedup_interval or (None, None)
    return _rounded(low), _rounded(high), row.verdict


def _rounded(value: float | None) -> float | None:
    """6 decimal places, but never fewer than 4 significant digits: a learning rate of 3e-7 is not 0.0."""
    if value is None or value == 0 or not math.isfinite(value):
        return value
    return round(value, max(6, 3 - math.floor(math.log10(abs(value)))))


@dataclass(frozen=True)
class Column:
    """One column: its markdown header and cell, and its flat (csv/json) keys and values."""

    key: str  # the name report.yaml uses
    header: str | None  # markdown header ("{speedup}": the recipe's speed-up name); None: csv/json only
    flat_keys: tuple[str, ...]
    flat: Callable[[Row], tuple]  # one value per flat key
    cell: Callable[[Row], str] = lambda row: NOT_APPLICABLE
    name: str | None = None  # in prose and plot legends (default: the header)
    from_settings: bool = False  # the results' settings (an experiment section's rows split by it)
    measure: Callable[[Row], tuple[float, float] | None] | None = (
        None  # plottable: (value, spread), None if not measured
    )
    axis: str | None = None  # the plot's y label for a panel of this column

    @property
    def short_name(self) -> str:
        return self.name or self.header or self.key


def _plain(
    key: str, header: str | None, value: Callable[[Row], Any], name: str | None = None, from_settings: bool = False
) -> Column:
    """A column of one value, flat as it is and shown as _optional writes it."""
    flat, cell = (lambda row: (value(row),)), (lambda row: _optional(value(row)))
    return Column(key, header, (key,), flat, cell, name, from_settings=from_settings)


def _setting(key: str, header: str | None = None, name: str | None = None) -> Column:
    return _plain(key, header, lambda row: row.configuration.get(key), name)


def _trained(key: str, header: str, name: str | None = None) -> Column:
    """A training setting of the results' settings, as experiment sections show it (E3: the learning-rate rule)."""
    return _plain(key, header, lambda row: row.settings.get(key), name, from_settings=True)


def _statistic(
    key: str, header: str, name: str | None = None, digits: int = 3, axis: str = "seconds per epoch (s)"
) -> Column:
    def flat(row: Row) -> tuple:
        stat = row.stats.get(key)
        return (_rounded(stat.mean), _rounded(stat.std)) if stat else (None, None)

    def measure(row: Row) -> tuple[float, float] | None:
        stat = row.stats.get(key)
        return (stat.mean, stat.std) if stat else None

    return Column(
        key,
        header,
        (f"{key}_mean", f"{key}_std"),
        flat,
        lambda row: _mean_std(row.stats.get(key), digits),
        name,
        measure=measure,
        axis=axis,
    )


# In csv/json order; markdown shows report.yaml's columns of each recipe. New flat keys go last so
# that existing csv columns keep their positions.
COLUMNS = {
    column.key: column
    for column in (
        Column("source", "source", ("source",), lambda row: (row.source,), lambda row: row.source),
        Column("recipe", None, ("recipe",), lambda row: (row.recipe,)),
        _setting("dataset"),
        Column("configuration", "configuration", ("configuration",), lambda row: (row.label,), lambda row: row.label),
        _setting("device"),
        _setting("cores"),
        _setting("strategy"),
        _setting("parallel"),
        _setting("world_size"),
        _setting("model", "model"),
        _setting("global_batch", "global batch"),
        _setting("per_device_batch", "per-device batch"),
        _setting("image_size", "image px", "image size"),
        Column(
            "runs",
            "runs",
            ("runs",),
            lambda row: (row.runs,),
            lambda row: str(row.runs) if row.source == OURS else NOT_APPLICABLE,
        ),
        Column(
            "total_s",
            "total s",
            ("total_s", "total_s_std"),
            lambda row: (
                _rounded(row.total_s.mean) if row.total_s else None,
                _rounded(row.total_s.std) if row.total_s and row.runs > 1 else None,
            ),
            lambda row: _mean_std(row.total_s),
        ),
        _statistic("iter_s", "s/iter (mean ± std)", "s/iter", digits=4, axis="seconds per iteration (s)"),
        _statistic("epoch_s", "s/epoch (mean ± std)", "s/epoch"),
        Column(
            "first_epoch_s",
            "first epoch s",
            ("first_epoch_s",),
            lambda row: (_rounded(row.first_epoch_s),),
            lambda row: _seconds(row.first_epoch_s),
        ),
        _statistic("steady_epoch_s", "later epochs s/epoch"),
        _statistic("train_epoch_s", "train s/epoch"),
        _statistic("test_epoch_s", "test s/epoch"),
        Column(
            "test_accuracy",
            "test accuracy",
            ("test_accuracy",),
            lambda row: (_rounded(row.test_accuracy),),
            lambda row: _accuracy(row.test_accuracy),
            axis="test accuracy (%)",
            measure=lambda row: None if row.test_accuracy is None else (100 * row.test_accuracy, 0.0),
        ),
        Column(
            "speedup",
            "speed-up ({speedup})",
            ("speedup",),
            lambda row: (None if row.speedup_beyond else _rounded(row.speedup),),
            _speedup_cell,
        ),
        Column("baseline", None, ("baseline",), lambda row: (row.baseline,)),
        Column(
            "environment", "environment", ("environment",), lambda row: (row.environment,), lambda row: row.environment
        ),
        _setting("nodes"),
        _setting("backend"),
        # Which of its section's environments a row ran in, when they differ (A, B, ...; see the note under the table).
        Column("env", "env", ("env",), lambda row: (row.mark or None,), lambda row: row.mark or NOT_APPLICABLE),
        # Experiment sections (report.yaml experiments): which run of which experiment, and its training settings.
        Column("experiment", None, ("experiment",), lambda row: (row.experiment,)),
        _plain("run", "run", lambda row: row.run),
        _trained("lr_scaling", "lr scaling"),
        _trained("warmup_epochs", "warm-up epochs"),
        _trained("effective_lr", "lr", "learning rate"),
        _trained("epochs", "epochs"),
        # A speed-up beyond the devices used (speedup_bounds): the ratio measured and why it is not a result; its
        # ``speedup`` is then null.
        Column(
            "speedup_beyond",
            None,
            ("speedup_beyond",),
            lambda row: (f"{row.speedup:.2f}× {row.speedup_beyond}" if row.speedup_beyond else None,),
        ),
        # The speed-up's verdict (envkit.runs.speedups): its interval from the runs, and faster, slower, no
        # difference shown, no verdict (a side of one run) or baseline.
        Column("verdict", None, ("speedup_low", "speedup_high", "speedup_verdict"), _verdict_flat),
        # A command's rows (the run wrapper's records): where they ran (csv/json: configuration), how many
        # failed, and the wall time of the rest.
        Column("where", "where", (), lambda row: (), lambda row: row.label),
        Column(
            "failed",
            "failed",
            ("failed",),
            # A command's row always says it; a recipe's where the run wrapper saw one of its runs fail.
            lambda row: (row.failed if row.place or row.failed else None,),
            lambda row: str(row.failed),
        ),
        Column(
            "wall_time_s",
            "wall time s",
            ("wall_time_s", "wall_time_s_std"),
            lambda row: (
                _rounded(row.wall_time_s.mean) if row.wall_time_s else None,
                _rounded(row.wall_time_s.std) if row.wall_time_s else None,
            ),
            lambda row: significant(row.wall_time_s),  # 42.23 ± 1, not 42.233 ± 1.021: what the spread allows
            "wall time",
            measure=lambda row: (row.wall_time_s.mean, row.wall_time_s.std) if row.wall_time_s else None,
            axis="wall time (s)",
        ),
        # A comparison's rows: what the runs really used, and the lock they ran on.
        _plain("device_used", "device used", lambda row: row.device),
        Column(
            "lock",
            "lock",
            ("lock",),
            lambda row: (row.lock,),
            lambda row: "unlocked" if row.lock is None else row.lock[:LOCK_DIGITS],
        ),
    )
}
# A command's columns: in csv/json only where the report holds a command's rows, so that a recipe's
# report keeps its bytes (and its last columns, the experiment's).
COMMAND_COLUMNS = ("where", "failed", "wall_time_s", "device_used", "lock")
FLAT_FIELDS = tuple(key for name, column in COLUMNS.items() if name not in COMMAND_COLUMNS for key in column.flat_keys)


def significant(stat: Stat | None) -> str:
    """Mean ± std in significant digits, for values of any scale (one sample: its value)."""
    if stat is None:
        return NOT_APPLICABLE
    return f"{stat.mean:.4g}" if stat.n == 1 else f"{stat.mean:.4g} ± {stat.std:.2g}"


def _metric_cell(row: Row, name: str) -> str:
    """Mean ± std in significant digits (a program's metrics have any scale: a loss of 0.0012, a count of 4000);
    where not every successful run reported it as a number, how many did, and how many reported NaN or ±inf."""
    cell = significant(row.metrics.get(name))
    notes = []
    if 0 < row.reported.get(name, 0) < row.succeeded:
        notes.append(f"{row.reported[name]} of {counted(row.succeeded, 'run')}")
    if row.not_finite.get(name):
        notes.append(f"{row.not_finite[name]} NaN/inf")
    return cell + (f" ({', '.join(notes)})" if notes else "")


def metric_column(name: str) -> Column:
    """One metric a command reported (``metrics.<name>``, nested names joined by "."): mean ± std."""

    def stat(row: Row) -> Stat | None:
        return row.metrics.get(name)

    return Column(
        f"{METRICS}.{name}",
        name,
        (f"{METRICS}.{name}_mean", f"{METRICS}.{name}_std"),
        lambda row: (_rounded(stat(row).mean), _rounded(stat(row).std)) if stat(row) else (None, None),
        lambda row: _metric_cell(row, name),
        measure=lambda row: (stat(row).mean, stat(row).std) if stat(row) else None,
        axis=name,
    )


def column_of(key: str) -> Column:
    """The column report.yaml names ``key``: one of COLUMNS, or a reported metric."""
    return COLUMNS.get(key) or metric_column(key.removeprefix(f"{METRICS}."))


def expanded(keys: list[str], section: Section) -> list[str]:
    """``keys`` with ``metrics`` replaced by the metrics the section's tables show (Section.shown_metric_names)."""
    metrics = [f"{METRICS}.{name}" for name in section.shown_metric_names]
    return [name for key in keys for name in (metrics if key == METRICS else [key])]

"""The report's columns, one registry: each column's markdown header and cell, and its csv/json keys and values.

Cells are formatted with fixed precision, so the same rows always give the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envkit.runs.results import Stat

# A column reads a report row (envkit.runs.report.Row), which is typed Any here: the grouping imports
# this registry (an experiment section's rows split by the settings it shows), not the other way round.
Row = Any

OURS = "ours"  # the source of the rows measured here (the others are published numbers)
NOT_APPLICABLE = "–"


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


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


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


def _setting(key: str, header: str | None = None, name: str | None = None, trained: bool = False) -> Column:
    """A setting of the row's configuration or, ``trained``, of the results' training settings, as experiment
    sections show them (E3: the learning-rate rule)."""

    def value(row: Row):
        return (row.settings if trained else row.configuration).get(key)

    return Column(
        key, header, (key,), lambda row: (value(row),), lambda row: _optional(value(row)), name, from_settings=trained
    )


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
            lambda row: (_rounded(row.speedup),),
            lambda row: NOT_APPLICABLE if row.speedup is None else f"{row.speedup:.2f}×",
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
        Column("run", "run", ("run",), lambda row: (row.run,), lambda row: _optional(row.run)),
        _setting("lr_scaling", "lr scaling", trained=True),
        _setting("warmup_epochs", "warm-up epochs", trained=True),
        _setting("effective_lr", "lr", "learning rate", trained=True),
        _setting("epochs", "epochs", trained=True),
    )
}
FLAT_FIELDS = tuple(key for column in COLUMNS.values() for key in column.flat_keys)

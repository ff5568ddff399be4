"""The report's one baseline and speed-up rule, for every table, every format and the page (issue 40 §4 and §6,
issue 41 §1): a recipe's rows and a command's alike.

Within a section, rows are compared where report.yaml's ``comparable_by`` agrees (the same model and batch; a
command's rows: all of them). The baseline of each such group is the row named by ``--baseline``, else the first
target of the experiment's list (envkit.yaml's ``targets``) that ran with its device checked, else the first row
in the table's order that did. A row whose device was not checked (the record has no device block, or its
program reported none: nothing says what it measured) and a CPU stand-in (a run of an accelerator's target that
initialised none: ``--allow-cpu``, a notebook's CPU mode) are never the baseline and get no speed-up; the notes
under the table say why.

Speed-up = the baseline's measure ÷ the row's (report.yaml ``speedup.metric``: a command's wall time, a recipe's
total or per-epoch time), each side's mean over its runs. Its verdict (envkit.runs.welch): the 95% interval of the
ratio from the runs, each run one sample (several runs, the initialisation timed apart: MLPerf's reporting rules,
docs/experiments.md), and "faster" or "slower" where the interval excludes 1, else "no difference shown"; a side
of one run gives no verdict, and says so.
"""

from __future__ import annotations

from envkit.runs.model import OURS, Row
from envkit.runs.results import Stat
from envkit.runs.welch import CONFIDENCE, ratio_interval

FASTER, SLOWER, NO_DIFFERENCE, NO_VERDICT = "faster", "slower", "no difference shown", "no verdict"
BASELINE = "baseline"
DECLARED = "named by --baseline"
LISTED = "the first target of the experiment's list ({targets}) that ran with its device checked"
FIRST = "the first row, in the table's order, that ran with its device checked"
METHOD = (
    f"Its verdict: ({CONFIDENCE:.0%} low–high) is the ratio's interval, Welch's t interval on the log of the runs' "
    "times (each run one sample); faster or slower where it excludes 1, else no difference shown; "
    "a row or baseline of one run gives no verdict. A CPU stand-in or an unchecked device gets no speed-up"
)


def _stat(row: Row, name: str | None) -> Stat | None:
    return {"total_s": row.total_s, "wall_time_s": row.wall_time_s}.get(name) or row.stats.get(name)


def speedup_name(row: Row) -> str | None:
    """The measure the row's speed-up divides: its section's speed-up metric, else that metric's fallback."""
    speedup = row.facts["speedup"]
    return speedup["metric"] if _stat(row, speedup["metric"]) else speedup.get("fallback")


def speedup_stat(row: Row) -> Stat | None:
    """The row's measure, over its runs."""
    name = speedup_name(row)
    stat = _stat(row, name) if name else None
    return stat if stat and stat.mean > 0 else None


def run_values(row: Row) -> list[float]:
    """The row's measure, one value per run behind it (a run's own mean for a per-epoch statistic): the samples
    of its verdict. Failed runs are left out, as from its mean (envkit.runs.rows); a published row has none."""
    name = speedup_name(row)
    values = []
    for run in (run for run in row.results if run.succeeded):
        # The run wrapper's wall time, else the recipe's timing (a command's record has none).
        value = (run.run or {}).get(name) if name == "wall_time_s" else run.timing.get(name)
        value = value.mean if isinstance(value, Stat) else value
        if isinstance(value, (int, float)) and value > 0:
            values.append(float(value))
    return values


def may_compare(row: Row) -> bool:
    """Whether the row takes part in speed-ups at all, as baseline or against it: measured, its device checked,
    and no CPU stand-in."""
    return not row.cpu_stand_in and row.device_checked and speedup_stat(row) is not None


def _choose(group: list[Row], declared: str | None, order: tuple[str, ...]) -> tuple[Row | None, str]:
    """The group's baseline row and the rule that chose it."""
    candidates = [row for row in group if may_compare(row)]
    if declared is not None:
        return next((row for row in candidates if row.label == declared), None), DECLARED
    listed = [row for target in order for row in candidates if row.target == target]
    if listed:
        return listed[0], LISTED.format(targets=", ".join(order))
    return next(iter(candidates), None), FIRST


def _verdict(base: Row, row: Row) -> tuple[tuple[float, float] | None, str]:
    sides = run_values(base), run_values(row)
    interval = ratio_interval(*sides)
    if interval is None:
        return None, NO_VERDICT
    return interval, FASTER if interval[0] > 1 else SLOWER if interval[1] < 1 else NO_DIFFERENCE


def assign_speedups(rows: list[Row], declared: str | None = None, order: tuple[str, ...] = ()) -> None:
    """Each row's speed-up against its group's baseline (see the module's rule), with its interval and verdict;
    ``declared``: the row label --baseline names; ``order``: the experiment's targets, in its list's order."""
    groups: dict[tuple, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.comparable_key(), []).append(row)
    for group in groups.values():
        base, rule = _choose(group, declared, order)
        if base is None:
            continue
        for row in group:
            if not may_compare(row):
                continue
            row.speedup = speedup_stat(base).mean / speedup_stat(row).mean
            row.baseline, row.baseline_rule = base.label, rule
            row.speedup_runs = (len(run_values(base)), len(run_values(row)))
            row.speedup_interval, row.verdict = (None, BASELINE) if row is base else _verdict(base, row)


def verdict_text(row: Row) -> str:
    """'faster (95% 1.40–1.78; 3 and 2 runs)', 'no verdict (1 run against 3)', 'baseline'."""
    if row.verdict == BASELINE:
        return BASELINE
    if row.source != OURS:
        return "published: no runs to judge"
    if row.speedup_interval is None:
        return f"{NO_VERDICT} ({_runs_text(row)})"
    base, own = row.speedup_runs
    low, high = row.speedup_interval
    return f"{row.verdict} ({CONFIDENCE:.0%} {low:.2f}–{high:.2f}; {base} and {own} runs)"


def baseline_text(rows: list[Row], declared: str | None = None) -> str:
    """The caption's baseline: each group's baseline row and the rule that chose it ('none' where no row could
    be the baseline, and why)."""
    chosen = dict.fromkeys(f"{row.baseline} ({row.baseline_rule})" for row in rows if row.verdict == BASELINE)
    if chosen:
        return "; ".join(chosen)
    if declared is not None:
        return f"none (--baseline {declared} is not a row here that ran with its device checked)"
    return "none (no row ran with its device checked and a measured time)"


def in_short(rows: list[Row]) -> list[str]:
    """The comparison in a student's words, before the table (issue 40 §12): a sentence per row with a speed-up,
    saying how much faster or slower than its baseline, how sure, from how many runs; one that is no result
    (beyond its devices, a busy host, another thread budget) says why instead."""
    lines = []
    for row in rows:
        if row.speedup is None or row.verdict == BASELINE or row.source != OURS:
            continue
        ratio = f"{row.speedup:.2f}×"
        if row.speedup_beyond is not None:
            lines.append(f"{row.label}: {ratio} against {row.baseline}, which is not a result ({row.speedup_beyond}).")
            continue
        runs = _runs_text(row)
        if row.speedup_interval is None:
            lines.append(f"{row.label}: {ratio} against {row.baseline}, no verdict: {runs}; run each more than once.")
            continue
        low, high = row.speedup_interval
        sure = f"{CONFIDENCE:.0%} interval {low:.2f}–{high:.2f}×, {runs}"
        if row.verdict == NO_DIFFERENCE:
            lines.append(f"{row.label}: no difference from {row.baseline} shown ({ratio}; {sure}).")
        else:
            lines.append(f"{row.label} is {row.verdict} than {row.baseline}: {ratio} ({sure}).")
    return lines


def _runs_text(row: Row) -> str:
    """'2 runs against 3': the row's runs against its baseline's."""
    base, own = row.speedup_runs
    return f"{own} run{'s' if own != 1 else ''} against {base}"

"""The time each row's runs took to reach its experiment's goal (report.yaml ``goal: {metric, value, at_most}``):
part of the report's model, read from the runs' series (a command's per-step files, a seed recipe's per-epoch
lists), so the page shows the model's numbers as it shows its speed-ups.
"""

from __future__ import annotations

from envkit.runs.model import Goal, Section
from envkit.runs.results import RunResult, Stat, stat_of


def goal_of(facts: dict) -> Goal | None:
    """The goal a section's facts name, if any."""
    goal = facts.get("goal")
    return Goal(goal["metric"], float(goal["value"]), goal.get("at_most", False)) if goal else None


def _reached(goal: Goal, values: list[float]) -> int | None:
    """The index of the first point that meets the goal."""
    return next(
        (i for i, value in enumerate(values) if (value <= goal.value if goal.at_most else value >= goal.value)), None
    )


def time_to_goal(goal: Goal, runs: list[RunResult]) -> tuple[Stat | None, tuple[int, int]]:
    """Seconds until the goal per successful run: a recipe's first epoch plus its later epochs' mean each; a
    command's wall time in proportion to the steps (steps taken as equally long)."""
    times = []
    recorded = 0
    for run in runs:
        if goal.metric not in run.series or not run.succeeded:
            continue
        recorded += 1
        values = run.series[goal.metric]["value"]
        index = _reached(goal, values)
        if index is None:
            continue
        if run.recipe is not None:
            steady = run.timing.get("steady_epoch_s")
            times.append(run.timing["first_epoch_s"] + index * (steady.mean if steady else 0.0))
        else:
            times.append(run.run["wall_time_s"] * (index + 1) / len(values))
    if not times:
        return None, (0, recorded)
    return Stat(**stat_of(times)), (len(times), recorded)


def assign_goals(section: Section) -> None:
    """Each row's time to its section's goal (Row.time_to_goal, Row.goal_reached), where the section has one."""
    goal = goal_of(section.facts)
    if goal is None:
        return
    for row in section.rows:
        row.time_to_goal, row.goal_reached = time_to_goal(goal, list(row.results))

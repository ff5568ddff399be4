"""The report for any command (issue 25 §7): the records the run wrapper wrote, grouped by experiment.

envkit/support/provenance.py writes one record per run of a command that keeps no record of its own:
its experiment, exit status, wall time, the metrics it reported (DVC's key/value metrics.json) and
its environment. Runs of one experiment are compared across the places they ran (the image, or the
host, and the device): wall time and every numeric metric as mean ± std over the successful runs,
the speed-up against a baseline place, and the environment each place had.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from envkit.support.bounded_load import parse_json, read_text


@dataclass(frozen=True)
class CommandRun:
    path: Path
    experiment: str
    place: str  # where it ran: the device, and the image or else the host
    exit_status: int
    wall_time_s: float
    metrics: dict[str, float]  # numeric metrics, nested keys joined with "."
    environment: dict


def is_command_record(document) -> bool:
    """A record the run wrapper wrote for a command (a seed recipe's record names its recipe)."""
    return isinstance(document, dict) and isinstance(document.get("run"), dict) and "recipe" not in document


def flat_metrics(metrics: dict, prefix: str = "") -> dict[str, float]:
    """dvclive's nested metrics as "train.loss" keys; only numbers (a step count is a number too)."""
    flat = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flat_metrics(value, f"{name}."))
        elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            flat[name] = float(value)
    return flat


def place_of(environment: dict) -> str:
    where = environment.get("image") or environment.get("host") or "unknown host"
    return f"{environment.get('device_type') or 'unknown device'} on {where}"


def parse_command_run(path: Path, document: dict) -> CommandRun:
    """One wrapper record; ValueError with a one-line reason when it is not usable."""
    run, metrics, environment = document["run"], document.get("metrics"), document.get("environment")
    if not isinstance(run.get("experiment"), str) or not isinstance(run.get("exit_status"), int):
        raise ValueError("run: needs its experiment (a string) and exit_status (an integer)")
    wall = run.get("wall_time_s")
    if not isinstance(wall, int | float) or isinstance(wall, bool) or wall < 0:
        raise ValueError("run.wall_time_s: needs a number of seconds >= 0")
    if metrics is not None and not isinstance(metrics, dict):
        raise ValueError(
            f"metrics: the program's metrics must be an object of name: value, got {type(metrics).__name__}"
        )
    if not isinstance(environment, dict):
        raise ValueError("environment: needs an object")
    return CommandRun(
        path=path,
        experiment=run["experiment"],
        place=place_of(environment),
        exit_status=run["exit_status"],
        wall_time_s=float(wall),
        metrics=flat_metrics(metrics or {}),
        environment=environment,
    )


def load_command_runs(directory: Path) -> tuple[list[CommandRun], list[str]]:
    """The wrapper records among ``directory``'s ``*.json``, plus one warning per unusable one."""
    runs, warnings = [], []
    for path in sorted(directory.glob("*.json")):
        try:
            document = parse_json(read_text(path))
        except (OSError, ValueError):
            continue  # envkit.runs.results names it
        if not is_command_record(document):
            continue
        try:
            runs.append(parse_command_run(path, document))
        except ValueError as exc:
            warnings.append(f"skipped {path}: {exc}")
    return runs, warnings


def _mean_std(values: list[float]) -> str:
    if not values:
        return "–"
    mean = sum(values) / len(values)
    std = math.sqrt(sum((value - mean) ** 2 for value in values) / len(values))
    return f"{mean:.4g} ± {std:.2g}"


def _environment(runs: list[CommandRun]) -> str:
    environment = runs[-1].environment
    parts = [
        f"Python {environment.get('python')}",
        f"torch {environment.get('torch')}" if environment.get("torch") else None,
        f"torch_xla {environment.get('torch_xla')}" if environment.get("torch_xla") else None,
        f"torch_tpu {environment.get('torch_tpu')}" if environment.get("torch_tpu") else None,
        environment.get("device_name"),
        f"lock {environment['lock_sha256'][:12]}" if environment.get("lock_sha256") else None,
        f"git {environment['git_revision'][:12]}{' (dirty)' if environment.get('git_dirty') else ''}"
        if environment.get("git_revision")
        else None,
    ]
    return ", ".join(part for part in parts if part)


def command_markdown(runs: list[CommandRun], baseline: str | None = None) -> str:
    """One section per experiment: a row per place, the baseline place first (``baseline``, else the slowest)."""
    lines = []
    for experiment in sorted({run.experiment for run in runs}):
        mine = [run for run in runs if run.experiment == experiment]
        places = {place: [run for run in mine if run.place == place] for place in sorted({run.place for run in mine})}
        walls = {place: [run.wall_time_s for run in group if run.exit_status == 0] for place, group in places.items()}
        means = {place: sum(values) / len(values) for place, values in walls.items() if values}
        base = baseline if baseline in means else max(means, key=means.get, default=None)
        names = sorted({name for run in mine if run.exit_status == 0 for name in run.metrics})
        lines += [
            f"## Experiment {experiment}",
            "",
            f"{len(mine)} run(s) in {len(places)} place(s); speed-up: wall time against {base or 'none'}.",
            "",
            "| " + " | ".join(["where", "runs", "failed", "wall time (s)", "speed-up", *names, "environment"]) + " |",
            "|" + "---|" * (6 + len(names)),
        ]
        for place, group in sorted(places.items(), key=lambda item: (item[0] != base, item[0])):
            ok = [run for run in group if run.exit_status == 0]
            speedup = f"{means[base] / means[place]:.2f}×" if base in means and place in means else "–"
            cells = [
                place,
                str(len(group)),
                str(len(group) - len(ok)),
                _mean_std(walls[place]),
                speedup,
                *(_mean_std([run.metrics[name] for run in ok if name in run.metrics]) for name in names),
                _environment(group),
            ]
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
        lines.append("")
    return "\n".join(lines)

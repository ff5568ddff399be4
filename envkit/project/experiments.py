"""The experiments table (envkit/data/experiments.yaml) as frozen records.

Every place that names an experiment (make targets, doctor, compare, demo, launch,
the README table, the report's experiment sections) reads this one table, so adding
an experiment is one entry there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from envkit.project.datafile import load_checked
from envkit.errors import EnvkitError
from envkit.project.datafile import DATA_DIR

TABLE_PATH = DATA_DIR / "experiments.yaml"
SCHEMA_PATH = DATA_DIR / "experiments.schema.json"


@dataclass(frozen=True)
class RecipeRun:
    """One run of an experiment's recipe: the whole argument list it gets before the user's flags."""

    label: str | None  # its name in the table (E3: b16, b16-scaled, ...), None for a one-run experiment
    name: str | None  # the results' run name, <experiment>-<label> (None: the recipe names it)
    summary: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class Experiment:
    name: str
    summary: str
    kind: str
    recipe: str
    args: tuple[str, ...]  # every run's arguments
    gpus: str  # "none" | "first" | "all"
    scale: str  # "single" | "torchrun" | "tpu-pod"
    published: str | None
    runs: tuple[RecipeRun, ...]  # one, or the table's runs in order (E3: a batch and learning-rate rule each)

    @property
    def named_runs(self) -> bool:
        """Several runs, each with a run name the results (and the report) know it by."""
        return self.runs[0].name is not None


def _runs(name: str, entry: dict) -> tuple[RecipeRun, ...]:
    args = tuple(entry["args"])
    if "runs" not in entry:
        return (RecipeRun(None, None, entry["summary"], args),)
    # The run name comes last: every run of the experiment keeps its own results file.
    return tuple(RecipeRun(label, f"{name}-{label}", facts["summary"], (*args, *facts["args"], "--run-name", f"{name}-{label}"))
                 for label, facts in entry["runs"].items())


@lru_cache(maxsize=None)
def load_experiments(path: Path = TABLE_PATH) -> dict[str, Experiment]:
    """Name -> Experiment, in the table's order; a malformed table is one line."""
    data = load_checked(path, SCHEMA_PATH)
    table, run_names = {}, set()
    for name, entry in data["experiments"].items():
        fields = {key: value for key, value in entry.items() if key not in ("args", "runs")}
        table[name] = Experiment(name=name, args=tuple(entry["args"]), runs=_runs(name, entry), **fields)
        for run in table[name].runs if table[name].named_runs else ():
            # e3 + run x-y and e3-x + run y would write the same results file
            if run.name in run_names:
                raise EnvkitError(f"{path}: experiments/{name}: run name {run.name} is another experiment's too")
            run_names.add(run.name)
    return table


def experiment(name: str) -> Experiment:
    table = load_experiments()
    if name not in table:
        raise EnvkitError(f"unknown experiment {name!r}: choose from {', '.join(table)}")
    return table[name]


def by_kind(kind_order: list[str]) -> list[Experiment]:
    """The experiments grouped by kind in ``kind_order`` (cheap kinds first), table order within a kind."""
    table = load_experiments().values()
    return [entry for kind in kind_order for entry in table if entry.kind == kind]


def run_of(run_name: str) -> tuple[Experiment, RecipeRun] | None:
    """The experiment and run a results file's requested run name belongs to, if any."""
    for entry in load_experiments().values():
        for run in entry.runs:
            if run.name is not None and run.name == run_name:
                return entry, run
    return None

"""The experiments table (envkit/data/experiments.yaml) as frozen records.

Every place that names an experiment (make targets, doctor, compare, demo, launch,
the README table, the report's experiment sections) reads this one table, so adding
an experiment is one entry there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.project.datafile import DATA_DIR, load_checked

TABLE_PATH = DATA_DIR / "experiments.yaml"
SCHEMA_PATH = DATA_DIR / "experiments.schema.json"


@dataclass(frozen=True)
class RecipeRun:
    """One run of an experiment's recipe."""

    label: str | None  # its name in the table (E3: b16, b16-scaled, ...), None for a one-run experiment
    name: str | None  # the results' run name, <experiment>-<label> (None: the recipe names it)
    summary: str
    args: tuple[str, ...]  # what makes it this run: the experiment's args, its own, and --run-name
    defaults: tuple[str, ...] = ()  # the experiment's size, which the user may change

    @property
    def argv(self) -> tuple[str, ...]:
        """Every recipe argument before the user's."""
        return (*self.args, *self.defaults)


@dataclass(frozen=True)
class Experiment:
    name: str
    summary: str
    title: str  # a run on this host in compare and demo: {gpus} and {processes} are filled in
    kind: str
    recipe: str
    args: tuple[str, ...]
    gpus: str  # "none" | "first" | "all"
    scale: str  # "single" | "torchrun" | "tpu-pod"
    published: str | None
    image_title: str | None = None  # the demo's run in the image
    defaults: tuple[str, ...] = ()  # recipe arguments the user may change (its size)
    runs: tuple[RecipeRun, ...] = ()  # one, or the table's runs in order (E3: a batch and learning-rate rule each)
    devices: int = 1  # the GPUs or TPU cores its setting needs at least (a notebook accelerator with fewer is refused)

    @property
    def named_runs(self) -> bool:
        """Several runs, each with a run name the results (and the report) know it by."""
        return self.runs[0].name is not None


def _runs(name: str, entry: dict) -> tuple[RecipeRun, ...]:
    args, defaults = tuple(entry["args"]), tuple(entry.get("defaults", ()))
    if "runs" not in entry:
        return (RecipeRun(None, None, entry["summary"], args, defaults),)
    # Each run names its results file, which the report finds it by.
    return tuple(
        RecipeRun(
            label, f"{name}-{label}", run["summary"], (*args, *run["args"], "--run-name", f"{name}-{label}"), defaults
        )
        for label, run in entry["runs"].items()
    )


@cache
def load_experiments(path: Path = TABLE_PATH) -> dict[str, Experiment]:
    """Name -> Experiment, in the table's order; a malformed table is one line."""
    data = load_checked(path, SCHEMA_PATH)
    table, run_names = {}, set()
    for name, entry in data["experiments"].items():
        fields = {key: value for key, value in entry.items() if key not in ("args", "defaults", "runs")}
        table[name] = Experiment(
            name=name,
            args=tuple(entry["args"]),
            defaults=tuple(entry.get("defaults", ())),
            runs=_runs(name, entry),
            **fields,
        )
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


def _options(args: tuple[str, ...] | list[str]) -> list[tuple[str, str | None]]:
    """(--option, value) pairs of an argument list: '--name value', '--name=value', or a flag with None."""
    pairs = []
    for index, word in enumerate(args):
        if not word.startswith("--") or word == "--":
            continue
        name, equals, value = word.partition("=")
        if not equals:
            following = args[index + 1] if index + 1 < len(args) else None
            value = following if following is not None and not following.startswith("--") else None
        pairs.append((name, value))
    return pairs


def check_recipe_args(entry: Experiment, args: tuple[str, ...] | list[str]) -> None:
    """Refuse recipe arguments that change what makes ``entry`` this experiment (a value its own args set,
    or one of its runs': E3's batch, learning-rate rule and run name).

    The recipes read the last of a repeated option, so a user's ``--parallel none`` after
    cpu-ddp-cifar's ``--parallel ddp`` would silently run another experiment under this name.
    An option may be abbreviated, as the recipes' argparse allows. Its ``defaults`` (its size) may change.
    """
    for run in entry.runs:
        _check_against(entry, run.args, args)


def _check_against(entry: Experiment, own_args: tuple[str, ...], args: tuple[str, ...] | list[str]) -> None:
    own = dict(_options(own_args))
    for name, value in _options(args):
        meant = [option for option in own if option.startswith(name) and len(name) > 2]
        if len(meant) != 1 or value == own[meant[0]]:
            continue
        option = meant[0]
        wanted = {**own, option: value}
        others = [
            other
            for other in load_experiments().values()
            if other.recipe == entry.recipe and dict(_options(other.args)).get(option) == value
        ]
        # The experiment that is what the user asked for: most of the wanted settings, this kind first.
        others.sort(
            key=lambda other: (
                -sum(dict(_options(other.args)).get(k) == v for k, v in wanted.items()),
                other.kind != entry.kind,
            )
        )
        instead = f"; {others[0].name} runs with {' '.join(others[0].args)}" if others else ""
        given = name if value is None else f"{name} {value}"
        raise EnvkitError(
            f"{entry.name} runs with {option} {own[option]} (envkit/data/experiments.yaml), "
            f"and the recipe arguments say {given}: drop it{instead}"
        )


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

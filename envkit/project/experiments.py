"""The experiments table (envkit/data/experiments.yaml) as frozen records.

Every place that names an experiment (make targets, doctor, compare, demo, launch,
the README table) reads this one table, so adding an experiment is one entry there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.project.datafile import DATA_DIR, load_checked

TABLE_PATH = DATA_DIR / "experiments.yaml"
SCHEMA_PATH = DATA_DIR / "experiments.schema.json"


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


@lru_cache(maxsize=None)
def load_experiments(path: Path = TABLE_PATH) -> dict[str, Experiment]:
    """Name -> Experiment, in the table's order; a malformed table is one line."""
    data = load_checked(path, SCHEMA_PATH)
    return {name: Experiment(name=name, args=tuple(entry.pop("args")), **entry)
            for name, entry in data["experiments"].items()}


def experiment(name: str) -> Experiment:
    table = load_experiments()
    if name not in table:
        raise EnvkitError(f"unknown experiment {name!r}: choose from {', '.join(table)}")
    return table[name]


def by_kind(kind_order: list[str]) -> list[Experiment]:
    """The experiments grouped by kind in ``kind_order`` (cheap kinds first), table order within a kind."""
    table = load_experiments().values()
    return [entry for kind in kind_order for entry in table if entry.kind == kind]

"""What the report knows before it reads a run: each section's facts and the published numbers.

What each section shows is data: envkit/data/report.yaml (per recipe and experiment: columns, panels, the
speed-up metric, what rows compare within), whose entries a project's own report.yaml (beside its envkit.yaml)
overrides. The seed recipes' published numbers (envkit/data/published.yaml) become rows of their own, labelled
as published, and join only the sections whose runs did the same work.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.project import DEFAULT_CONFIG
from envkit.project.datafile import DATA_DIR
from envkit.runs.columns import COLUMNS, METRICS, column_of, counted
from envkit.runs.model import UNLABELLED_BACKEND, Row, device_rank
from envkit.runs.results import Stat
from envkit.support.bounded_load import load_yaml

# A project's own report facts: beside its envkit.yaml, in report.yaml's layout (recipes:, experiments:).
PROJECT_FACTS = "report.yaml"
ENTRY_KEYS = ("title", "intro", "columns", "panels", "tick", "speedup", "comparable_by", "goal")


def _data(name: str):
    return load_yaml(DATA_DIR / name)


@cache
def report_facts() -> dict:
    """envkit/data/report.yaml: per-recipe columns, speed-up metric, grouping and plot bars; what a
    command's experiment shows by default (``command``)."""
    return _data("report.yaml")


def project_facts(config: Path = DEFAULT_CONFIG) -> dict:
    """envkit's report facts with the project's report.yaml (beside ``config``) laid over them, entry by entry:
    a project's entry replaces the keys it gives of envkit's entry of that name (a command experiment's: of
    the ``command`` default). Its problems are one line naming the file (EnvkitError)."""
    facts = report_facts()
    path = config.parent / PROJECT_FACTS
    if not (path.exists() or path.is_symlink()):
        return facts
    own = load_yaml(path)
    _check_project_facts(path, own)
    merged = {group: dict(facts[group]) for group in ("recipes", "experiments")}
    for group, entries in own.items():
        for name, entry in (entries or {}).items():
            base = facts[group].get(name) or facts["command"]
            merged[group][name] = {**base, **entry}
    return {**facts, **merged}


def _check_project_facts(path: Path, own) -> None:
    def refuse(where: str, problem: str):
        raise EnvkitError(f"{path}: {where}: {problem}")

    if not isinstance(own, dict) or not set(own) <= {"recipes", "experiments"}:
        refuse("top level", "a mapping of recipes: and experiments:, each naming what a section shows")
    columns = sorted(COLUMNS) + [METRICS, f"{METRICS}.<name>"]
    for group, entries in own.items():
        if entries is not None and not isinstance(entries, dict):
            refuse(group, "a mapping of names to what their sections show")
        for name, entry in (entries or {}).items():
            where = f"{group}.{name}"
            if group == "recipes" and name not in report_facts()["recipes"]:
                refuse(where, f"not a recipe the results schema knows ({', '.join(report_facts()['recipes'])})")
            if not isinstance(entry, dict) or not set(entry) <= set(ENTRY_KEYS):
                refuse(where, f"a mapping of {', '.join(ENTRY_KEYS)}")
            listed = entry.get("columns", [])
            if not isinstance(listed, list) or not all(isinstance(key, str) and _known(key) for key in listed):
                refuse(f"{where}.columns", f"a list of columns, each one of: {', '.join(columns)}")
            panels = entry.get("panels", [])
            if not isinstance(panels, list) or not all(_drawable(panel) for panel in panels):
                refuse(
                    f"{where}.panels",
                    f"a list of panels, each {METRICS} (a panel per metric) or a list of measured columns "
                    f"with one axis ({', '.join(key for key in COLUMNS if COLUMNS[key].measure)}, {METRICS}.<name>)",
                )
            goal = entry.get("goal", {"metric": "", "value": 0})
            if (
                not isinstance(goal, dict)
                or set(goal) - {"metric", "value", "at_most"}
                or not isinstance(goal.get("metric"), str)
                or isinstance(goal.get("value"), bool)
                or not isinstance(goal.get("value"), int | float)
                or not isinstance(goal.get("at_most", False), bool)
            ):
                refuse(f"{where}.goal", "a mapping of metric (a name), value (a number) and at_most (true for a loss)")
            for key in ("title", "intro", "tick"):
                if key in entry and not isinstance(entry[key], str):
                    refuse(f"{where}.{key}", "a string")


def _known(key: str) -> bool:
    return key in COLUMNS or key == METRICS or key.startswith(f"{METRICS}.")


def _drawable(panel) -> bool:
    if panel == METRICS:
        return True
    return (
        isinstance(panel, list)
        and bool(panel)
        and all(isinstance(key, str) and _known(key) and key != METRICS and column_of(key).measure for key in panel)
        and len({column_of(key).axis for key in panel}) == 1
    )


def section_facts(facts: dict, recipe: str | None, experiment: str | None) -> dict:
    """What a section shows: its experiment's entry of ``facts``, else its recipe's; a command's experiment
    without an entry shows the ``command`` default."""
    if experiment:
        return facts["experiments"].get(experiment) or facts["command"]
    return facts["recipes"][recipe]


def shown_settings(facts: dict, experiment: str | None) -> tuple[str, ...]:
    """The results settings an experiment section shows as columns (and splits its rows by)."""
    if experiment is None:
        return ()
    return tuple(key for key in section_facts(facts, None, experiment)["columns"] if column_of(key).from_settings)


def load_published() -> dict:
    return _data("published.yaml")


def run_work(dataset: str, settings: dict) -> dict:
    """The work a run did, which a published row must share to be compared with it: the data, how much of it
    (a fake set's size, a cap on the steps), and for how many epochs."""
    return {
        "dataset": dataset,
        "train_images": "all" if dataset == "real" else settings.get("fake_train_size"),
        "max_steps": settings.get("max_steps"),
        "epochs": settings.get("epochs"),
    }


def published_work(source: dict) -> dict:
    """A published source's work: its dataset whole, uncapped, for the epochs it states (else any)."""
    return {"dataset": source["dataset"], "train_images": "all", "max_steps": None, "epochs": source.get("epochs")}


def same_work(published: dict, measured: dict) -> bool:
    return all(value is None and key == "epochs" or measured[key] == value for key, value in published.items())


def work_differences(work: dict, works: list[dict]) -> list[str]:
    """How ``work`` differs from the other ``works`` of its recipe and dataset: its value of each fact that is
    not the same in all of them (none where they all agree)."""
    words = {
        "train_images": lambda value: "every train image" if value == "all" else f"{value} train images",
        "max_steps": lambda value: "no step cap" if value is None else f"at most {value} steps",
        "epochs": lambda value: "epochs not recorded" if value is None else counted(value, "epoch"),
    }
    return [describe(work[fact]) for fact, describe in words.items() if len({other[fact] for other in works}) > 1]


def describe_work(work: dict) -> str:
    images = {"all": "every train image", None: "train images not recorded"}.get(
        work["train_images"], f"{work['train_images']} train images"
    )
    steps = f", at most {work['max_steps']} steps" if work["max_steps"] is not None else ""
    epochs = f", {counted(work['epochs'], 'epoch')}" if work["epochs"] is not None else ""
    return f"{work['dataset']} data, {images}{steps}{epochs}"


def published_rows(recipe: str) -> list[Row]:
    rows = []
    for rank, source in enumerate(load_published().get(recipe, []), start=1):
        for entry in source["rows"]:
            configuration = {
                "device": entry["device"],
                "cores": entry.get("cores"),
                "strategy": entry.get("strategy"),
                "parallel": entry.get("parallel"),
                "world_size": entry["world_size"],
                "nodes": 1,
                # the published TPU numbers predate TorchTPU
                "backend": UNLABELLED_BACKEND if entry["device"] == "tpu" else None,
                "model": entry.get("model", source.get("model")),
                "global_batch": entry.get("global_batch"),
                "per_device_batch": None,
                "image_size": source.get("image_size"),
                "dataset": source["dataset"],
            }
            # Published spreads come without a sample count (n=0); single published
            # numbers count as one sample so no spread is printed for them.
            stats = {name: Stat(entry[name][0], entry[name][1], 0) for name in ("iter_s", "epoch_s") if name in entry}
            stats.update(
                {name: Stat(entry[name], 0.0, 1) for name in ("train_epoch_s", "test_epoch_s") if name in entry}
            )
            total = entry.get("total_s")
            rows.append(
                Row(
                    source=source["label"],
                    source_short=source["short"],
                    source_rank=rank,
                    recipe=recipe,
                    configuration=configuration,
                    device_rank=device_rank(configuration),
                    runs=0,
                    total_s=Stat(total, 0.0, 1) if total is not None else None,
                    first_epoch_s=None,
                    stats=stats,
                    test_accuracy=None,
                    environment=source["note"],
                )
            )
    return rows

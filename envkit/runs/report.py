"""Group result files into comparison rows and write them as md, csv or json.

Any command's runs (the run wrapper's records, issue 25 §7) are grouped by experiment, one row per
place they ran (the device, and the image, host or notebook): wall time and every metric the
program reported as mean ± std over its successful runs, the speed-up against a baseline place
(the cpu run, else the first), and the environment. The seed recipes' tables follow the published
experiments (their numbers: envkit/data/published.yaml): MNIST as E1 (total, s/iter, s/epoch,
first epoch, accuracy, speed-up) and CIFAR as E2 (train and test s/epoch per parallel mode, per
model and batch); the runs of an experiment that varies the training itself (E3: batch and
learning-rate rule) get a section of their own, one row per run. What each section shows is data:
envkit/data/report.yaml, whose entries a project's own report.yaml (beside its envkit.yaml)
overrides; every column is one entry of COLUMNS, or one reported metric ("metrics.<name>").
Output is a pure function of the input files: rows are sorted and floats formatted with fixed
precision, so the same directory always gives the same bytes.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.project import DEFAULT_CONFIG
from envkit.project.datafile import DATA_DIR
from envkit.project.experiments import Experiment, run_of
from envkit.runs.results import CONFIGURATION_KEYS, ENVIRONMENT_KEYS, RunResult, Stat, results_schema, stat_of
from envkit.support.bounded_load import load_yaml

DEVICE_ORDER = {"tpu": 0, "cuda": 1, "cpu": 2}
MODE_ORDER = {"single": 0, "none": 0, "dp": 1, "xmp": 2, "spmd": 3, "ddp": 4}
BACKEND_ORDER = results_schema()["properties"]["configuration"]["properties"]["backend"]["enum"]
# The published experiments ran torch_xla: its rows keep their plain names, other backends are named.
UNLABELLED_BACKEND = "torch_xla"
# processes_per_node follows from the mode, world size and nodes (and version 1 files were upgraded
# to processes_per_node = world_size, which DP and SPMD runs would not record): rows ignore it.
ROW_KEYS = tuple(key for key in CONFIGURATION_KEYS if key != "processes_per_node")
OURS = "ours"
# A notebook's runs are rows of their own, named by where they ran and on which packages: the same
# configuration on a runtime's packages and on its lock is the two-notebooks lesson, not one row.
NOTEBOOK_KEY = "notebook"
NOT_APPLICABLE = "–"
# A project's own report facts: beside its envkit.yaml, in report.yaml's layout (recipes:, experiments:).
PROJECT_FACTS = "report.yaml"
# In report.yaml's columns and panels: every metric the section's runs reported (a panel each in the plot).
METRICS = "metrics"
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


@dataclass
class Row:
    source: str  # OURS or a published label
    source_short: str  # for plot ticks
    recipe: str | None  # None: a command's runs
    configuration: dict
    runs: int
    total_s: Stat | None
    first_epoch_s: float | None
    stats: dict  # name in STAT_KEYS -> Stat, only those present
    test_accuracy: float | None
    environment: str
    source_rank: int = 0  # published sources keep their order in published.yaml
    experiment: str | None = None  # the experiment whose run this row is (report.yaml experiments): its own section
    run: str | None = None  # that run's name within the experiment
    run_rank: int = 0  # the run's place in the experiment
    settings: dict = field(default_factory=dict)  # the shown_settings of its runs (one value each: rows split by them)
    speedup: float | None = None
    baseline: str | None = None
    environments: tuple = ()  # the distinct environment_facts of its runs (none for published rows)
    mark: str = ""  # which of its section's environments, when the section holds several
    facts: dict = field(default_factory=dict)  # its section's (section_facts)
    place: str | None = None  # a command's row: where its runs ran (place_of)
    failed: int = 0  # a command's runs that exited with another status than 0 (left out of the statistics)
    wall_time_s: Stat | None = None  # the run wrapper's wall time of the successful runs
    metrics: dict = field(default_factory=dict)  # reported metric name -> Stat over the successful runs reporting it
    results: tuple = ()  # the runs behind it, for the HTML page's curves and differences (none for published rows)

    @property
    def label(self) -> str:
        return self.place or configuration_label(self.configuration)

    def comparable_key(self) -> tuple:
        return (self.source,) + tuple(str(self.configuration.get(key)) for key in self.facts.get("comparable_by", ()))

    def sort_key(self) -> tuple:
        c = self.configuration
        mode = c.get("parallel") if c.get("parallel") not in (None, "none") else c.get("strategy") or "single"
        comparable = tuple(
            str(c.get(key)) if key == "model" else c.get(key) or 0 for key in self.facts.get("comparable_by", ())
        )
        return (
            self.run_rank,
            self.source_rank,
            comparable,
            # A command's places start from the cpu run, its default baseline; a recipe's, as published.
            int(c.get("device") != "cpu") if self.place else DEVICE_ORDER.get(c.get("device"), 9),
            c.get("world_size") or 1,
            MODE_ORDER.get(mode, 9),
            c.get("nodes") or 1,
            BACKEND_ORDER.index(c.get("backend")),
            self.place or "",
            json.dumps([c, self.settings], sort_keys=True),  # last: never a tie, whatever the file order
        )


@dataclass
class Section:
    recipe: str | None  # None: a command's experiment
    dataset: str | None  # None: a command's (the program's data is its own)
    facts: dict
    rows: list[Row] = field(default_factory=list)
    environments: list[tuple] = field(default_factory=list)  # set only when its measured rows differ
    experiment: str | None = None  # an experiment's section (report.yaml experiments), else the recipe's
    run_summaries: dict[str, str] = field(default_factory=dict)  # an experiment's: its runs' summaries by label
    apart: str | None = None  # published rows alone: why they are compared with none of the runs measured here

    @property
    def title(self) -> str:
        if self.recipe is None:
            return self.facts.get("title") or f"experiment {self.experiment}"
        title = f"{self.facts['title'] if self.experiment else self.recipe} · dataset {self.dataset}"
        return title + (" · published, compared with no run here" if self.apart else "")

    @property
    def metric_names(self) -> list[str]:
        """Every metric its rows report, sorted."""
        return sorted({name for row in self.rows for name in row.metrics})


@dataclass
class Report:
    sections: list[Section]
    runs: int
    skipped: int
    baseline_rule: str
    reference: bool


def configuration_label(configuration: dict) -> str:
    """Short name of a configuration: the device, how the work is spread, and the backend and nodes where they say more."""
    device = configuration.get("device")
    size = configuration.get("world_size") or configuration.get("cores") or 1
    parallel = configuration.get("parallel")
    strategy = configuration.get("strategy")
    if parallel == "dp":
        mode = f"DP×{size}"
    elif parallel == "ddp":
        mode = f"DDP×{size}"
    elif strategy == "xmp":
        mode = f"xmp×{configuration.get('cores') or size}"
    elif strategy == "spmd":
        mode = f"SPMD×{configuration.get('cores') or size}"
    else:
        mode = f"×{size}"
    extras = []
    if configuration.get("backend") not in (None, UNLABELLED_BACKEND):
        extras.append(configuration["backend"])
    if (configuration.get("nodes") or 1) > 1:
        extras.append(f"{configuration['nodes']} nodes")
    if configuration.get(NOTEBOOK_KEY):
        extras.append(configuration[NOTEBOOK_KEY])
    return f"{device} {mode}" + (f" ({', '.join(extras)})" if extras else "")


def notebook_label(notebook: dict) -> str:
    """'colab v5e-1, lock' or 'kaggle TpuV5E8, runtime packages' (CPU mode says so)."""
    where = f"{notebook['platform']} {notebook['accelerator']}" + (" CPU mode" if notebook.get("cpu_mode") else "")
    return f"{where}, {'lock' if notebook['packages'] == 'lock' else 'runtime packages'}"


def pooled(stats: list[Stat]) -> Stat:
    """Mean and population std over all samples behind several (mean, std, n)."""
    total = sum(s.n for s in stats)
    mean = sum(s.mean * s.n for s in stats) / total
    variance = sum(s.n * (s.std**2 + (s.mean - mean) ** 2) for s in stats) / total
    return Stat(mean, math.sqrt(variance), total)


def _short(value) -> str:
    # A sha256 is told apart by its first 12 digits, like an image ID.
    return "none" if value is None else value[:12] if len(str(value)) == 64 else str(value)


def environment_line(environment: dict) -> str:
    count = environment.get("device_count")
    name = environment.get("device_name") or environment.get("device_type") or "unknown device"
    # For CPUs device_count is the logical CPUs, which "×2" would read as two sockets.
    several = "{name}, {count} CPUs" if environment.get("device_type") == "cpu" else "{name} ×{count}"
    parts = [several.format(name=name, count=count) if isinstance(count, int) and count > 1 else name]
    # torch's CUDA build shows in its version tag already; on GPUs it is the CUDA runtime that ran.
    keys = (
        ("python", "torch", "torchvision", "torch_xla", "torch_tpu")
        + (("torch_cuda_build",) if environment.get("device_type") == "cuda" else ())
        + ("image",)
    )
    for key in keys:
        if environment.get(key):
            parts.append(f"{'cuda' if key == 'torch_cuda_build' else key} {environment[key]}")
    if environment.get("lock_sha256"):
        parts.append(f"lock {_short(environment['lock_sha256'])}")
    return ", ".join(parts)


def environment_facts(run: RunResult) -> tuple:
    """The facts that make two runs' environments comparable (report.yaml environment_facts)."""
    return tuple(
        _fact(key, run.environment[key] if key in ENVIRONMENT_KEYS else run.configuration.get(key))
        for key in report_facts()["environment_facts"]
    )


def _fact(key: str, value):
    # A lock is made for one Python minor, and an image's patch release is its base's, not the lock's:
    # a host venv and an image of one lock run one environment even where the patch releases differ.
    if key == "python" and isinstance(value, str):
        return ".".join(value.split(".")[:2])
    return value


def describe_environment(facts: tuple) -> str:
    return ", ".join(f"{key} {_short(value)}" for key, value in zip(report_facts()["environment_facts"], facts))


def _row_from_runs(recipe: str, configuration: dict, runs: list[RunResult], facts: dict, **placement) -> Row:
    """One measured row; ``placement``: the experiment, run, run_rank and settings of an experiment's row."""
    stat_names = sorted({name for run in runs for name, value in run.timing.items() if isinstance(value, Stat)})
    stats = {}
    for name in stat_names:
        present = [run.timing[name] for run in runs if name in run.timing]
        # A statistic only some runs recorded would describe a subset: leave it out.
        if len(present) == len(runs):
            stats[name] = pooled(present)
    totals = stat_of([run.timing["total_s"] for run in runs])
    accuracies = [run.test_accuracy for run in runs if run.test_accuracy is not None]
    environments = sorted({environment_line(run.environment) for run in runs})
    environment = environments[0] if len(environments) == 1 else "mixed: " + "; ".join(environments)
    return Row(
        source=OURS,
        source_short=OURS,
        recipe=recipe,
        configuration=configuration,
        runs=len(runs),
        total_s=Stat(totals["mean"], totals["std"], totals["n"]),
        first_epoch_s=sum(run.timing["first_epoch_s"] for run in runs) / len(runs),
        stats=stats,
        test_accuracy=sum(accuracies) / len(accuracies) if accuracies else None,
        environment=environment,
        environments=tuple(sorted({environment_facts(run) for run in runs}, key=json.dumps)),
        facts=facts,
        results=tuple(runs),
        **placement,
    )


def place_of(run: RunResult) -> str:
    """Where a command ran: its device, and the notebook, else the image, else the host."""
    environment = run.environment
    where = (
        notebook_label(run.notebook)
        if run.notebook is not None
        else environment.get("image") or environment.get("host") or "unknown host"
    )
    return f"{environment.get('device_type') or 'unknown device'} on {where}"


def _stat(values: list[float]) -> Stat | None:
    return Stat(**stat_of(values)) if values else None


def _command_row(place: str, runs: list[RunResult], facts: dict) -> Row:
    """A command's runs in one place: wall time and each reported metric over the successful runs."""
    done = [run for run in runs if run.succeeded]
    environments = sorted({environment_line(run.environment) for run in runs})
    names = sorted({name for run in done for name in run.metrics})
    return Row(
        source=OURS,
        source_short=OURS,
        recipe=None,
        configuration={"device": runs[0].environment.get("device_type")},
        runs=len(runs),
        total_s=None,
        first_epoch_s=None,
        stats={},
        test_accuracy=None,
        environment=environments[0] if len(environments) == 1 else "mixed: " + "; ".join(environments),
        experiment=runs[0].experiment,
        environments=tuple(sorted({environment_facts(run) for run in runs}, key=json.dumps)),
        facts=facts,
        place=place,
        failed=len(runs) - len(done),
        wall_time_s=_stat([run.run["wall_time_s"] for run in done]),
        metrics={name: _stat([run.metrics[name] for run in done if name in run.metrics]) for name in names},
        results=tuple(runs),
    )


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


def counted(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


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
                    runs=0,
                    total_s=Stat(total, 0.0, 1) if total is not None else None,
                    first_epoch_s=None,
                    stats=stats,
                    test_accuracy=None,
                    environment=source["note"],
                )
            )
    return rows


def _metric(row: Row, name: str | None) -> float | None:
    stat = {"total_s": row.total_s, "wall_time_s": row.wall_time_s}.get(name) or row.stats.get(name)
    return stat.mean if stat else None


def _speedup_value(row: Row) -> float | None:
    speedup = row.facts["speedup"]
    value = _metric(row, speedup["metric"])
    return value if value is not None else _metric(row, speedup.get("fallback"))


def _assign_speedups(rows: list[Row], baseline: str | None) -> None:
    groups: dict[tuple, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.comparable_key(), []).append(row)
    for group in groups.values():
        if baseline is None and group[0].place is not None:  # a command's places: the cpu run's, else the first
            reference = next((row for row in group if row.configuration["device"] == "cpu"), group[0])
        elif baseline is None:
            reference = next((row for row in group if (row.configuration.get("world_size") or 1) == 1), None)
        else:
            reference = next((row for row in group if row.label == baseline), None)
        if reference is None:
            continue
        base_value = _speedup_value(reference)
        for row in group:
            value = _speedup_value(row)
            if base_value and value:
                row.speedup = base_value / value
                row.baseline = reference.label


def _mark_environments(section: Section) -> None:
    """Letter each environment of a section whose measured rows ran in more than one."""
    seen: list[tuple] = []
    for row in section.rows:
        seen += [facts for facts in row.environments if facts not in seen]
    if len(seen) < 2:
        return
    section.environments = seen
    for row in section.rows:
        row.mark = ",".join(environment_letter(seen.index(facts)) for facts in row.environments)


def environment_letter(index: int) -> str:
    return string.ascii_uppercase[index % 26] + (str(index // 26) if index >= 26 else "")


def _environments_text(section: Section) -> str:
    """'2 environments that differ in backend (A = ...; B = ...)'."""
    names = report_facts()["environment_facts"]
    differing = [name for index, name in enumerate(names) if len({facts[index] for facts in section.environments}) > 1]
    listed = "; ".join(
        f"{environment_letter(i)} = {describe_environment(facts)}" for i, facts in enumerate(section.environments)
    )
    return f"{len(section.environments)} environments that differ in {_and(differing)} ({listed})"


def _refuse_mixed_environments(sections: list[Section]) -> None:
    for section in sections:
        if section.environments:
            raise EnvkitError(
                f"--strict: the {section.title} runs come from {_environments_text(section)}; "
                "report one environment's results, or leave out --strict to compare them marked"
            )


def _experiment_run(run: RunResult, config: Path, facts: dict) -> tuple[Experiment | None, str | None, int]:
    """(experiment, the run's name within it, its place) when ``run`` is a run of an experiment that
    report.yaml gives a section (found by the run name it was started with, and showing the settings it
    recorded); else (None, None, 0)."""
    found = run_of(run.requested_name, config) if config.is_file() else None  # results read outside a project
    if (
        found is None
        or found[0].recipe != run.recipe
        or found[0].name not in facts["experiments"]
        or not all(key in run.settings for key in shown_settings(facts, found[0].name))
    ):
        return None, None, 0
    entry, recipe_run = found
    return entry, recipe_run.label, entry.runs.index(recipe_run)


def build_report(
    results: list[RunResult],
    skipped: int = 0,
    baseline: str | None = None,
    reference: bool = False,
    strict: bool = False,
    config: Path = DEFAULT_CONFIG,
) -> Report:
    """Group a command's runs by experiment and place, a recipe's by recipe, dataset and configuration;
    add published rows on request.

    ``strict``: refuse (EnvkitError) when a section's measured runs differ in environment_facts.
    ``config``: the project whose experiments the runs may belong to, and whose report.yaml sits beside it.
    """
    facts = project_facts(config)
    owners: dict[str, Experiment] = {}
    grouped: dict[tuple, tuple[dict, dict, list[RunResult]]] = {}
    places: dict[str, dict[str, list[RunResult]]] = {}  # a command's experiment -> place -> its runs
    for run in results:
        if run.recipe is None:
            places.setdefault(run.experiment, {}).setdefault(place_of(run), []).append(run)
            continue
        configuration = {key: run.configuration[key] for key in ROW_KEYS}
        if run.notebook is not None:
            configuration[NOTEBOOK_KEY] = notebook_label(run.notebook)
        entry, name, rank = _experiment_run(run, config, facts)
        owner = None if entry is None else owners.setdefault(entry.name, entry).name
        settings = {key: run.settings.get(key) for key in shown_settings(facts, owner)}
        key = (
            owner or "",
            name,
            rank,
            run.recipe,
            json.dumps(configuration, sort_keys=True),
            json.dumps(settings, sort_keys=True),
        )
        grouped.setdefault(key, (configuration, settings, []))[2].append(run)
    sections: dict[tuple, Section] = {}
    works: dict[tuple, list[dict]] = {}  # section -> the work of each of its runs
    for (owner, name, rank, recipe, _, _), (configuration, settings, runs) in grouped.items():
        # Experiment sections come after the recipes' ("" sorts first), each of its own.
        key = (owner, recipe, configuration["dataset"])
        section = sections.setdefault(
            key,
            Section(
                recipe,
                configuration["dataset"],
                section_facts(facts, recipe, owner),
                experiment=owner or None,
                run_summaries={run.label: run.summary for run in owners[owner].runs} if owner else {},
            ),
        )
        placement = dict(experiment=owner, run=name, run_rank=rank, settings=settings) if owner else {}
        section.rows.append(_row_from_runs(recipe, configuration, runs, section.facts, **placement))
        works.setdefault(key, []).extend(run_work(configuration["dataset"], run.settings) for run in runs)
    for experiment, runs_by_place in places.items():
        own = section_facts(facts, None, experiment)
        rows = [_command_row(place, runs, own) for place, runs in runs_by_place.items()]
        # After the recipes' sections, by the experiment's name ("~" sorts after the recipes and their experiments').
        sections[("~", experiment, "")] = Section(None, None, own, rows, experiment=experiment)
    if baseline is not None:
        labels = sorted({row.label for section in sections.values() for row in section.rows})
        if baseline not in labels:
            raise EnvkitError(f"--baseline {baseline!r} matches no configuration; choose one of: {', '.join(labels)}")
    if reference:
        _place_published(sections, works)
    for section in sections.values():
        section.rows.sort(key=Row.sort_key)
        if "speedup" in section.facts:
            _assign_speedups(section.rows, baseline)
        _mark_environments(section)
    ordered = [sections[key] for key in sorted(sections)]
    if strict:
        _refuse_mixed_environments(ordered)
    rule = (
        f"the configuration {baseline} (--baseline)"
        if baseline is not None
        else "the first single-device configuration of each group (choose with --baseline)"
    )
    return Report(sections=ordered, runs=len(results), skipped=skipped, baseline_rule=rule, reference=reference)


def _place_published(sections: dict[tuple, Section], works: dict[tuple, list[dict]]) -> None:
    """Each published source joins the recipe's sections whose every run did its work (nothing was published
    per run of an experiment); a source that joins none stands apart, in a section that says why, so a short
    run on generated data is never set beside a published full epoch of real data."""
    for recipe in sorted({section.recipe for section in sections.values() if not section.experiment}):
        own = [key for key, section in sections.items() if section.recipe == recipe and not section.experiment]
        for source in load_published().get(recipe, []):
            work = published_work(source)
            fitting = [key for key in own if all(same_work(work, measured) for measured in works[key])]
            if not fitting:
                here = "; ".join(dict.fromkeys(describe_work(measured) for key in own for measured in works[key]))
                apart = (
                    f"The published rows did other work ({describe_work(work)}) than every run measured here ({here}): "
                )
                fitting = [("", recipe, source["dataset"], "published")]
                sections.setdefault(
                    fitting[0],
                    Section(
                        recipe,
                        source["dataset"],
                        sections[own[0]].facts,
                        apart=apart + "they stand apart, compared with none.",
                    ),
                )
            for key in fitting:  # fresh rows for each section: a row's speed-up is its section's
                sections[key].rows.extend(
                    dataclasses.replace(row, facts=sections[key].facts)
                    for row in published_rows(recipe)
                    if row.source == source["label"]
                )


# ---- columns ----------------------------------------------------------------


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


def _setting(key: str, header: str | None = None, name: str | None = None) -> Column:
    return Column(
        key,
        header,
        (key,),
        lambda row: (row.configuration.get(key),),
        lambda row: _optional(row.configuration.get(key)),
        name,
    )


def _trained(key: str, header: str, name: str | None = None) -> Column:
    """A training setting of the results' settings, as experiment sections show it (E3: the learning-rate rule)."""
    return Column(
        key,
        header,
        (key,),
        lambda row: (row.settings.get(key),),
        lambda row: _optional(row.settings.get(key)),
        name,
        from_settings=True,
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
        _trained("lr_scaling", "lr scaling"),
        _trained("warmup_epochs", "warm-up epochs"),
        _trained("effective_lr", "lr", "learning rate"),
        _trained("epochs", "epochs"),
        # A command's rows (the run wrapper's records): where they ran (csv/json: configuration), how many
        # failed, and the wall time of the rest.
        Column("where", "where", (), lambda row: (), lambda row: row.label),
        Column(
            "failed",
            "failed",
            ("failed",),
            lambda row: (row.failed if row.place else None,),
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
            lambda row: _mean_std(row.wall_time_s),
            "wall time",
            measure=lambda row: (row.wall_time_s.mean, row.wall_time_s.std) if row.wall_time_s else None,
            axis="wall time (s)",
        ),
    )
}
# A command's columns: in csv/json only where the report holds a command's rows, so that a recipe's
# report keeps its bytes (and its last columns, the experiment's).
COMMAND_COLUMNS = ("where", "failed", "wall_time_s")
FLAT_FIELDS = tuple(key for name, column in COLUMNS.items() if name not in COMMAND_COLUMNS for key in column.flat_keys)


def _metric_cell(stat: Stat | None) -> str:
    # A program's metrics have any scale (a loss of 0.0012, a step count of 4000): significant digits.
    if stat is None:
        return NOT_APPLICABLE
    return f"{stat.mean:.4g}" if stat.n == 1 else f"{stat.mean:.4g} ± {stat.std:.2g}"


def metric_column(name: str) -> Column:
    """One metric a command reported (``metrics.<name>``, nested names joined by "."): mean ± std."""

    def stat(row: Row) -> Stat | None:
        return row.metrics.get(name)

    return Column(
        f"{METRICS}.{name}",
        name,
        (f"{METRICS}.{name}_mean", f"{METRICS}.{name}_std"),
        lambda row: (_rounded(stat(row).mean), _rounded(stat(row).std)) if stat(row) else (None, None),
        lambda row: _metric_cell(stat(row)),
        measure=lambda row: (stat(row).mean, stat(row).std) if stat(row) else None,
        axis=name,
    )


def column_of(key: str) -> Column:
    """The column report.yaml names ``key``: one of COLUMNS, or a reported metric."""
    return COLUMNS.get(key) or metric_column(key.removeprefix(f"{METRICS}."))


def expanded(keys: list[str], section: Section) -> list[str]:
    """``keys`` with ``metrics`` replaced by every metric the section's rows reported."""
    return [
        name for key in keys for name in ([f"{METRICS}.{m}" for m in section.metric_names] if key == METRICS else [key])
    ]


def markdown_columns(section: Section, reference: bool) -> list[Column]:
    """The columns of a section's table: report.yaml's, plus the source (--reference) and env (marked) columns."""
    keys = expanded(list(section.facts["columns"]), section)
    if section.environments:  # next to the environment it names
        keys.insert(keys.index("environment") if "environment" in keys else len(keys), "env")
    if reference and not section.experiment:
        keys.insert(0, "source")
    return [column_of(key) for key in keys]


# ---- formatting -------------------------------------------------------------


def _md_line(cells: list[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _recipe_intro(section: Section, report: Report) -> list[str]:
    facts = section.facts
    metric = COLUMNS[facts["speedup"]["metric"]].short_name
    within = _and([COLUMNS[key].short_name for key in facts["comparable_by"]])
    lines = [
        f"Seconds are wall-clock; s/iter and s/epoch are mean ± std over all iterations/epochs of all runs. "
        f"Speed-up = baseline {metric} ÷ row {metric}, within the same {within}; baseline: {report.baseline_rule}."
    ]
    if report.reference:
        lines.append('Rows whose source starts with "published" are the published numbers, not measured here.')
    if section.apart:
        lines.append(section.apart)
    return lines


def _command_intro(section: Section, report: Report) -> list[str]:
    baseline = next((row.baseline for row in section.rows if row.baseline), None)
    return [
        f"Runs of `{section.experiment}` (the project's experiments) by where they ran: the run wrapper's wall time "
        "in seconds and each metric the program reported, mean ± std over its successful runs (failed runs are "
        f"counted, not measured). Speed-up = baseline wall time ÷ row wall time; baseline: {baseline or 'none'} "
        + (
            "(--baseline)."
            if report.baseline_rule.endswith("(--baseline)")
            else "(the cpu run, else the first; choose with --baseline)."
        )
    ]


def _experiment_intro(section: Section) -> list[str]:
    """What the experiment varies, then each of its runs here with the summary the experiments table gives it."""
    summaries = section.run_summaries
    shown = list(dict.fromkeys(row.run for row in section.rows))
    return [
        f"{section.facts.get('intro', '')} Seconds are wall-clock, mean ± std over all epochs of all runs; the test accuracy "
        f"is the last epoch's. Runs of `{section.experiment}` (the project's experiments):",
        "",
        *(f"- {run}: {summaries[run]}" for run in shown),
    ]


def _section_markdown(section: Section, report: Report) -> list[str]:
    lines = [f"## {section.title}", ""]
    if section.recipe is None:
        lines += _command_intro(section, report)
    else:
        lines += _experiment_intro(section) if section.experiment else _recipe_intro(section, report)
    lines.append("")
    columns = markdown_columns(section, report.reference)
    speedup_name = section.facts.get("speedup", {}).get("name")
    headers = [column.header.format(speedup=speedup_name) for column in columns]
    lines += [_md_line(headers), _md_line(["---"] * len(headers))]
    lines += [_md_line([column.cell(row) for column in columns]) for row in section.rows]
    if section.environments:
        lines += ["", f"env: these rows ran in {_environments_text(section)}; `--strict` refuses to compare them."]
    lines.append("")
    return lines


def format_markdown(report: Report) -> str:
    configurations = sum(1 for section in report.sections for row in section.rows if row.source == OURS)
    summary = f"{counted(report.runs, 'run')} in {counted(configurations, 'configuration')}"
    if report.skipped:
        summary += f"; {counted(report.skipped, 'file')} skipped (see warnings)"
    lines = ["# envkit comparison report", "", summary + ".", ""]
    for section in report.sections:
        lines += _section_markdown(section, report)
    return "\n".join(lines)


def _flat_columns(report: Report) -> list[Column]:
    """The csv/json columns: FLAT_FIELDS', then, where the report holds a command's rows, the command's
    columns and a column per metric they reported."""
    columns = [column for name, column in COLUMNS.items() if name not in COMMAND_COLUMNS]
    if not any(row.place for section in report.sections for row in section.rows):
        return columns
    names = sorted({name for section in report.sections for name in section.metric_names})
    return columns + [COLUMNS[name] for name in COMMAND_COLUMNS] + [metric_column(name) for name in names]


def flat_rows(report: Report) -> list[dict]:
    """One flat record per row, shared by the csv and json formats."""
    records = []
    columns = _flat_columns(report)
    for section in report.sections:
        for row in section.rows:
            record = {}
            for column in columns:
                record.update(zip(column.flat_keys, column.flat(row)))
            records.append(record)
    return records


def format_csv(report: Report) -> str:
    buffer = io.StringIO()
    fields = tuple(key for column in _flat_columns(report) for key in column.flat_keys)
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for record in flat_rows(report):
        writer.writerow({key: "" if value is None else value for key, value in record.items()})
    return buffer.getvalue()


def format_json(report: Report) -> str:
    document = {
        "schema_version": 1,
        "runs": report.runs,
        "skipped": report.skipped,
        "baseline_rule": report.baseline_rule,
        "rows": flat_rows(report),
    }
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


FORMATTERS = {"md": format_markdown, "csv": format_csv, "json": format_json}


def render_report(report: Report, output_format: str) -> str:
    return FORMATTERS[output_format](report)

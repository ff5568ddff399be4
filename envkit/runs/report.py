"""Group result files into the report's sections and rows (envkit.runs.model), by one grouping (envkit.runs.grouping).

Any command's runs (the run wrapper's records, issue 25 §7) are comparisons (envkit.runs.comparison):
the runs that did the same work, a row per target on its own lock. The seed recipes' runs are grouped
by recipe, dataset, work and configuration, as the published experiments were (envkit.runs.published): MNIST as E1
and CIFAR as E2; the runs of an experiment that varies the training itself (E3: batch and
learning-rate rule) get a section of their own, one row per run. Rows are sorted, so the same
directory always gives the same report; envkit.runs.formats writes it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.project import DEFAULT_CONFIG
from envkit.project.experiments import Experiment, load_experiments, run_of
from envkit.runs.comparison import command_placements
from envkit.runs.environments import environments_text, mark_environments
from envkit.runs.goals import assign_goals
from envkit.runs.grouping import Placement, group
from envkit.runs.model import NOTEBOOK_KEY, Report, Row, Section, device_rank, notebook_label
from envkit.runs.published import (
    describe_work,
    load_published,
    project_facts,
    published_rows,
    published_work,
    run_work,
    same_work,
    section_facts,
    shown_settings,
    work_differences,
)
from envkit.runs.results import CONFIGURATION_KEYS, RunResult
from envkit.runs.rows import measured_row
from envkit.runs.section_words import describe
from envkit.runs.speedup_bounds import flag_beyond
from envkit.runs.speedups import DECLARED, FIRST, LISTED, assign_speedups, may_compare
from envkit.support.bounded_load import parse_json

# processes_per_node follows from the mode, world size and nodes (and version 1 files were upgraded
# to processes_per_node = world_size, which DP and SPMD runs would not record): rows ignore it.
ROW_KEYS = tuple(key for key in CONFIGURATION_KEYS if key != "processes_per_node")


def _check_baseline(baseline: str, rows: list[Row]) -> None:
    """``--baseline``: one line (EnvkitError) where it names no row, or only rows that cannot be the baseline (a
    CPU stand-in, an unchecked device: nothing says what they measured)."""
    labels = sorted({row.label for row in rows if may_compare(row)})
    if baseline in labels:
        return
    if any(row.label == baseline for row in rows):
        why = "a CPU stand-in or a device not checked, which is never the baseline"
    else:
        why = "matches no configuration"
    raise EnvkitError(f"--baseline {baseline!r} {why}; choose one of: {', '.join(labels) or 'none'}")


def _refuse_mixed_environments(sections: list[Section]) -> None:
    for section in sections:
        if section.environments:
            raise EnvkitError(
                f"--strict: the {section.title} runs come from {environments_text(section)}; "
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


def unique_runs(results: list[RunResult]) -> tuple[list[RunResult], list[str]]:
    """The runs, each once: a record that repeats another's run name and start is a copy (a results folder
    copied into another, a download kept twice), counted once; and a line for each copy left out."""
    seen: dict[tuple, RunResult] = {}
    kept, copies = [], []
    for run in results:
        key = (run.run_name, run.started_at) if run.started_at else (str(run.path),)
        if key in seen:
            copies.append(f"{run.path} repeats {seen[key].path} (the same run name and start): counted once")
        else:
            seen[key] = run
            kept.append(run)
    return kept, copies


def _not_finite_lines(runs: list[RunResult]) -> list[str]:
    """A line for each run that reported a metric as NaN or ±inf: never dropped without a word."""
    return [
        f"{run.path}: {', '.join(sorted(run.not_finite))} reported as NaN or ±inf: "
        "counted in its row, left out of the mean"
        for run in runs
        if run.not_finite
    ]


def _recipe_placement(run: RunResult, facts: dict, config: Path) -> Placement:
    """Where a recipe's run goes (envkit.runs.grouping): its section by recipe, dataset, work and configuration (an
    experiment's run that report.yaml names: its experiment's section, a row per run of it), its row by its
    configuration and shown settings. Runs of other work (epochs, a step cap, a fake set's size) are never pooled: a
    section each, its title saying what differs from its recipe and dataset's other sections."""
    configuration = {key: run.configuration[key] for key in ROW_KEYS}
    if run.notebook is not None:
        configuration[NOTEBOOK_KEY] = notebook_label(run.notebook)
    entry, name, rank = _experiment_run(run, config, facts)
    owner = None if entry is None else entry.name
    settings = {key: run.settings.get(key) for key in shown_settings(facts, owner)}
    dataset = configuration["dataset"]
    work = json.dumps(run_work(dataset, run.settings), sort_keys=True)
    own = section_facts(facts, run.recipe, owner)

    def section(works: list[str]) -> Section:
        return Section(
            run.recipe,
            dataset,
            own,
            [own["title"] if owner else run.recipe, f"dataset {dataset}"],
            experiment=owner,
            run_summaries={entry_run.label: entry_run.summary for entry_run in entry.runs} if entry else {},
            takes_published=not owner,
            differs=work_differences(parse_json(work), [parse_json(other) for other in dict.fromkeys(works)]),
        )

    placement = dict(experiment=owner, run=name, run_rank=rank, settings=settings) if owner else {}
    return Placement(
        # Experiment sections come after the recipes' ("" sorts first), each of its own.
        section_key=(owner or "", run.recipe, dataset, work),
        row_key=(name, rank, json.dumps(configuration, sort_keys=True), json.dumps(settings, sort_keys=True)),
        siblings=(owner or "", run.recipe, dataset),
        work=work,
        section=section,
        row=lambda runs, made: measured_row(
            runs,
            made.facts,
            recipe=made.recipe,
            configuration=configuration,
            device_rank=device_rank(configuration),
            **placement,
        ),
    )


def _works(sections: dict[tuple, Section]) -> dict[tuple, list[dict]]:
    """The work of each run of each section that takes published rows, which those rows must share."""
    return {
        key: [run_work(section.dataset, run.settings) for row in section.rows for run in row.results]
        for key, section in sections.items()
        if section.takes_published
    }


def build_report(
    results: list[RunResult],
    skipped: int = 0,
    baseline: str | None = None,
    reference: bool = False,
    strict: bool = False,
    config: Path = DEFAULT_CONFIG,
    current_locks: dict[str, str | None] | None = None,
) -> Report:
    """The report of ``results``: a command's runs as comparisons (envkit.runs.comparison: the runs that did the
    same work, a row per target), a recipe's by recipe, dataset and configuration; published rows on request.

    ``strict``: refuse (EnvkitError) when a section's measured runs differ in environment_facts.
    ``config``: the project whose experiments the runs may belong to, and whose report.yaml sits beside it.
    ``current_locks``: its targets' current locks (envkit.runs.target_locks), which a named target's runs join on.
    """
    facts = project_facts(config)
    runs, copies = unique_runs(results)
    recipes = [(run, _recipe_placement(run, facts, config)) for run in runs if run.recipe is not None]
    # After the recipes' sections ("~" sorts after the recipes and their experiments').
    sections = group(recipes + command_placements([run for run in runs if run.recipe is None], facts, current_locks))
    if baseline is not None:
        _check_baseline(baseline, [row for section in sections.values() for row in section.rows])
    if reference:
        _place_published(sections, _works(sections))
    orders = _target_orders(config)
    for section in sections.values():
        section.rows.sort(key=Row.sort_key)
        if "speedup" in section.facts:
            assign_speedups(section.rows, baseline, orders.get(section.experiment, ()))
        flag_beyond(section.rows)
        mark_environments(section)
        assign_goals(section)
    ordered = [sections[key] for key in sorted(sections)]
    if strict:
        _refuse_mixed_environments(ordered)
    describe(ordered, baseline, reference)
    rule = (
        f"the configuration {baseline} ({DECLARED})"
        if baseline is not None
        else f"{LISTED.format(targets='envkit.yaml targets')}, else {FIRST}"
    )
    return Report(
        sections=ordered,
        runs=len(runs),
        skipped=skipped,
        baseline_rule=rule,
        baseline=baseline,
        reference=reference,
        copies=len(copies),
        warnings=copies + _not_finite_lines(runs),
    )


def _target_orders(config: Path) -> dict[str, tuple[str, ...]]:
    """Each experiment's targets, in its list's order (the baseline is the first that ran, checked); none for
    results read outside a project."""
    return {name: entry.targets for name, entry in load_experiments(config).items()} if config.is_file() else {}


def _place_published(sections: dict[tuple, Section], works: dict[tuple, list[dict]]) -> None:
    """Each published source joins the recipe's sections whose every run did its work (nothing was published
    per run of an experiment); a source that joins none stands apart, in a section that says why, so a short
    run on generated data is never set beside a published full epoch of real data."""
    for recipe in sorted({section.recipe for section in sections.values() if section.takes_published}):
        own = [key for key, section in sections.items() if section.recipe == recipe and section.takes_published]
        for source in load_published().get(recipe, []):
            work = published_work(source)
            fitting = [key for key in own if all(same_work(work, measured) for measured in works[key])]
            if not fitting:
                here = "; ".join(dict.fromkeys(describe_work(measured) for key in own for measured in works[key]))
                apart = (
                    f"The published rows did other work ({describe_work(work)}) than every run measured here ({here}): "
                )
                fitting = [("", recipe, source["dataset"], "~published")]  # after the measured sections (work: "{...}")
                sections.setdefault(
                    fitting[0],
                    Section(
                        recipe,
                        source["dataset"],
                        sections[own[0]].facts,
                        [recipe, f"dataset {source['dataset']}"],
                        apart=apart + "they stand apart, compared with none.",
                        takes_published=True,
                    ),
                )
            for key in fitting:  # fresh rows for each section: a row's speed-up is its section's
                sections[key].rows.extend(
                    dataclasses.replace(row, facts=sections[key].facts)
                    for row in published_rows(recipe)
                    if row.source == source["label"]
                )

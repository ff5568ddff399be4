"""The words around each section's table: the lines before it (what its rows measure, its baseline, what sets it
apart) and the notes under it. The report's model carries them (Section.intro, Section.notes), filled once the
sections are grouped and their speed-ups assigned (envkit.runs.report), so every view (markdown, the HTML page)
shows the same words: a recipe's section, an experiment's (E3: its runs and their summaries) and a command's
comparison differ in their data, not in the views' code.
"""

from __future__ import annotations

import json

from envkit.runs.columns import COLUMNS, counted, words_and
from envkit.runs.comparison import arguments_text
from envkit.runs.environments import environments_text
from envkit.runs.model import SHOWN_METRICS, SHOWN_ROWS, Section
from envkit.runs.speedups import METHOD, baseline_text


def one_line(text: str) -> str:
    """``text`` on one markdown line: a metric's or experiment's name may hold a newline (a program's own key)."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _recipe_intro(section: Section, baseline: str | None, reference: bool) -> list[str]:
    facts = section.facts
    metric = COLUMNS[facts["speedup"]["metric"]].short_name
    within = words_and([COLUMNS[key].short_name for key in facts["comparable_by"]])
    lines = [
        f"Seconds are wall-clock; s/iter and s/epoch are mean ± std over all iterations/epochs of all runs. "
        f"Speed-up = baseline {metric} ÷ row {metric}, within the same {within}; baseline: "
        f"{baseline_text(section.rows, baseline)}. {METHOD}."
    ]
    if reference:
        lines.append('Rows whose source starts with "published" are the published numbers, not measured here.')
    if section.apart:
        lines.append(section.apart)
    return lines


def _command_intro(section: Section, baseline: str | None, reference: bool) -> list[str]:
    work = section.work
    data = f", data {json.dumps(work['data'], sort_keys=True)}" if work.get("data") is not None else ""
    lines = [
        f"Runs of `{section.experiment}` that did the same work (arguments {arguments_text(work.get('arguments', []))}"
        f"{data}), a row per target on its own lock: the run wrapper's wall time in seconds and each metric the "
        "program reported, mean ± std over its successful runs (failed runs are counted, not measured). "
        f"Speed-up = baseline wall time ÷ row wall time; baseline: {baseline_text(section.rows, baseline)}. "
        f"{METHOD}."
    ]
    if section.differs:
        lines.append(
            f"Not pooled with the other runs of `{section.experiment}`: they differ in {words_and(section.differs)} "
            "(a comparison each)."
        )
    return [one_line(line) for line in lines]


def _experiment_intro(section: Section) -> list[str]:
    """What the experiment varies, then each of its runs here with the summary the experiments table gives it."""
    summaries = section.run_summaries
    shown = list(dict.fromkeys(row.run for row in section.rows))
    return [
        f"{section.facts.get('intro', '')} Seconds are wall-clock, mean ± std over all epochs of all runs; "
        "the test accuracy "
        f"is the last epoch's. Runs of `{section.experiment}` (the project's experiments):",
        "",
        *(f"- {run}: {summaries[run]}" for run in shown),
    ]


def section_intro(section: Section, baseline: str | None, reference: bool) -> list[str]:
    """The lines before a section's table (markdown; the HTML page shows them too): what its rows measure, its
    baseline, and what sets a comparison apart from its experiment's others."""
    if section.recipe is None:
        return _command_intro(section, baseline, reference)
    return _experiment_intro(section) if section.experiment else _recipe_intro(section, baseline, reference)


def section_notes(section: Section) -> list[str]:
    """Under a section's table: the environments its rows ran in, where they differ; its CPU runs of accelerator
    targets, unchecked devices, the run wrapper's warnings, NaN, partial metrics, and rows or metrics the table
    leaves out."""
    rows = section.rows
    notes = []
    if section.environments:
        notes.append(f"env: these rows ran in {environments_text(section)}; `--strict` refuses to compare them.")
    stand_ins = [row.label for row in rows if row.cpu_stand_in]
    if stand_ins:
        notes.append(
            f"{words_and(stand_ins)}: runs of an accelerator's target whose device block shows no accelerator "
            "initialised, or a notebook's CPU mode: CPU runs, kept out of the speed-ups."
        )
    if not all(row.device_checked for row in rows):
        notes.append(
            "device used (not checked): the record has no device block, or its program ran no Python that "
            "reported one, so the target's label stands for what the program initialised; such a row is kept out "
            "of the speed-ups (nothing says what it measured)."
        )
    notes += [f"{row.label}: the run wrapper warns: {warning}" for row in rows for warning in row.warnings]
    if "failed" not in section.facts["columns"]:  # a recipe's run the run wrapper saw fail: never left out unsaid
        notes += [
            f"{row.label}: {row.failed} of its {counted(row.runs, 'run')} failed (the run wrapper's exit status): "
            "counted in runs, left out of its numbers."
            for row in rows
            if row.failed
        ]
    if any(row.not_finite for row in rows):
        notes.append("NaN/inf: values a run reported as NaN or ±inf are counted in the cell, left out of its mean.")
    if any(0 < count < row.succeeded for row in rows for count in row.reported.values()):
        notes.append("k of n runs: a metric only some of the row's successful runs reported; its mean is theirs.")
    rows_left_out = len(section.rows) - len(section.shown_rows)
    if rows_left_out:
        notes.append(
            f"{counted(rows_left_out, 'more row')} left out of this table: it shows the first {SHOWN_ROWS} and each "
            "one's baseline; `envkit report --format csv` (or json) lists every one."
        )
    left_out = len(section.metric_names) - len(section.shown_metric_names)
    if left_out:
        notes.append(
            f"{counted(left_out, 'more metric')} left out of this table: it shows the {SHOWN_METRICS} the most runs "
            "reported; `envkit report --format csv` (or json) lists every one."
        )
    return [one_line(note) for note in notes]


def describe(sections: list[Section], baseline: str | None, reference: bool) -> None:
    """Give each section its intro and notes (``baseline``: the row --baseline named; ``reference``: published rows
    were asked for)."""
    for section in sections:
        section.intro = section_intro(section, baseline, reference)
        section.notes = section_notes(section)

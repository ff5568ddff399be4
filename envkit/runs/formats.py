"""A report as markdown, csv or json: a pure function of the report, so the same results give the same bytes."""

from __future__ import annotations

import csv
import io
import json

from envkit.project.secrets import redacted
from envkit.runs.columns import (
    COLUMNS,
    COMMAND_COLUMNS,
    NOT_APPLICABLE,
    Column,
    column_of,
    counted,
    expanded,
    metric_column,
    significant,
)
from envkit.runs.model import OURS, Report, Section
from envkit.runs.section_words import one_line


def markdown_columns(section: Section, reference: bool) -> list[Column]:
    """The columns of a section's table: report.yaml's, plus the source (--reference) and env (marked) columns."""
    keys = expanded(list(section.facts["columns"]), section)
    if section.environments:  # next to the environment it names
        keys.insert(keys.index("environment") if "environment" in keys else len(keys), "env")
    if reference and section.takes_published:
        keys.insert(0, "source")
    return [column_of(key) for key in keys]


def _md_line(cells: list[str]) -> str:
    return "| " + " | ".join(one_line(cell).replace("|", "\\|") for cell in cells) + " |"


SERIES_HEADERS = ("where", "series", "runs", "steps", "final value", "first step")


def series_rows(section: Section) -> list[list[str]]:
    """Each row's series (dvclive's per-step files, a seed recipe's per-epoch lists) as table cells: each run's
    final value across the runs; a per-step series' first step apart (a per-epoch series has none apart)."""
    rows = []
    for row in section.shown_rows:
        for name in section.series_names:
            curve = row.curves.get(name)
            if curve is not None:
                steps = f"{curve.unit}s {curve.steps[0]}–{curve.steps[-1]}"
                first = significant(curve.first) if curve.per_step and curve.first.n else NOT_APPLICABLE
                final = significant(curve.final) if curve.final.n else NOT_APPLICABLE
                if curve.not_finite:
                    final += f" ({curve.not_finite} NaN/inf logged, left out)"
                where = row.label if row.run is None else f"{row.run}: {row.label}"
                rows.append([where, name, str(curve.runs), steps, final, first])
    return rows


SERIES_INTRO = (
    "Series (the figures draw them as curves): each run's final value, mean ± std across the runs that wrote the "
    "series; a per-step series' first step apart (it holds compilation and warm-up); a per-epoch series' first "
    "epoch is timed apart instead."
)


def _series_markdown(section: Section) -> list[str]:
    """Each row's series: its final value across the runs, a per-step series' first step apart."""
    rows = series_rows(section)
    if not rows:
        return []
    return [
        "",
        SERIES_INTRO,
        "",
        _md_line(list(SERIES_HEADERS)),
        _md_line(["---"] * len(SERIES_HEADERS)),
        *(_md_line(cells) for cells in rows),
    ]


def section_headers(section: Section, columns: list[Column]) -> list[str]:
    """The headers of a section's columns; only the speed-up's names its metric: a metric's own name may hold
    braces."""
    speedup_name = section.facts.get("speedup", {}).get("name")
    return [
        column.header.format(speedup=speedup_name) if column.key == "speedup" else column.header for column in columns
    ]


def _section_markdown(section: Section, report: Report) -> list[str]:
    lines = [f"## {one_line(section.title)}", "", *section.intro, ""]
    columns = markdown_columns(section, report.reference)
    headers = section_headers(section, columns)
    lines += [_md_line(headers), _md_line(["---"] * len(headers))]
    lines += [_md_line([column.cell(row) for column in columns]) for row in section.shown_rows]
    lines += ["", *section.notes] if section.notes else []
    lines += _series_markdown(section)
    lines.append("")
    return lines


def format_markdown(report: Report) -> str:
    configurations = sum(1 for section in report.sections for row in section.rows if row.source == OURS)
    summary = f"{counted(report.runs, 'run')} in {counted(configurations, 'configuration')}"
    if report.skipped:
        summary += f"; {counted(report.skipped, 'file')} skipped (see warnings)"
    if report.copies:
        summary += f"; {counted(report.copies, 'copied record')} (the run name and start of another) counted once"
    lines = ["# envkit comparison report", "", summary + ".", ""]
    for section in report.sections:
        lines += _section_markdown(section, report)
    return "\n".join(lines)


def _flat_columns(report: Report) -> list[Column]:
    """The csv/json columns that have a value in at least one of the report's rows (issue 40 §11: a command's
    experiment has no recipe columns, a recipe's none of a command's), in FLAT_FIELDS' order, then the command's
    columns and a column per metric the rows reported; a report without rows keeps FLAT_FIELDS' header."""
    rows = [row for section in report.sections for row in section.rows]
    names = sorted({name for section in report.sections for name in section.metric_names})
    fixed = [column for name, column in COLUMNS.items() if name not in COMMAND_COLUMNS]
    if not rows:
        return fixed
    columns = fixed + [COLUMNS[name] for name in COMMAND_COLUMNS] + [metric_column(name) for name in names]
    return [column for column in columns if any(value is not None for row in rows for value in column.flat(row))]


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
    """The report as text; a token a run's arguments or stderr hold is redacted (the report is shared)."""
    return redacted(FORMATTERS[output_format](report))

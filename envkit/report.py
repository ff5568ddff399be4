"""Group result files into comparison rows and write them as md, csv or json.

The tables follow the published experiments (shared/reference/experiments.md):
MNIST as E1 (total, s/iter, s/epoch, first epoch, accuracy, speed-up) and CIFAR
as E2 (train and test s/epoch per parallel mode, per model and batch). Output is
a pure function of the input files: rows are sorted and floats formatted with
fixed precision, so the same directory always gives the same bytes.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from importlib import resources

import yaml

from envkit.errors import EnvkitError
from envkit.results import STAT_KEYS, RunResult, Stat, stat_of

DEVICE_ORDER = {"tpu": 0, "cuda": 1, "cpu": 2}
MODE_ORDER = {"single": 0, "none": 0, "dp": 1, "xmp": 2, "spmd": 3, "ddp": 4}
OURS = "ours"
NOT_APPLICABLE = "–"
# Which timing the speed-up compares: E1 compares whole runs, E2 training epochs.
SPEEDUP_METRIC = {"mnist": "total_s", "cifar": "train_epoch_s"}
SPEEDUP_METRIC_NAME = {"total_s": "total s", "train_epoch_s": "train s/epoch"}
# Rows are only compared with rows that did the same work.
COMPARABLE_BY = {"mnist": ("model",), "cifar": ("model", "global_batch", "image_size")}


@dataclass
class Row:
    source: str  # OURS or a published label
    source_short: str  # for plot ticks
    recipe: str
    configuration: dict
    runs: int
    total_s: Stat | None
    first_epoch_s: float | None
    stats: dict  # name in STAT_KEYS -> Stat, only those present
    test_accuracy: float | None
    environment: str
    source_rank: int = 0  # published sources keep their order in published.yaml
    speedup: float | None = None
    baseline: str | None = None

    @property
    def label(self) -> str:
        return configuration_label(self.configuration)

    def comparable_key(self) -> tuple:
        return (self.source,) + tuple(str(self.configuration.get(key)) for key in COMPARABLE_BY[self.recipe])

    def sort_key(self) -> tuple:
        c = self.configuration
        mode = c.get("parallel") if c.get("parallel") not in (None, "none") else c.get("strategy") or "single"
        comparable = tuple(str(c.get(key)) if key == "model" else c.get(key) or 0 for key in COMPARABLE_BY[self.recipe])
        return (
            self.source_rank, comparable, DEVICE_ORDER.get(c.get("device"), 9), c.get("world_size") or 1,
            MODE_ORDER.get(mode, 9), json.dumps(c, sort_keys=True),  # last: never a tie, whatever the file order
        )


@dataclass
class Section:
    recipe: str
    dataset: str
    rows: list[Row] = field(default_factory=list)


@dataclass
class Report:
    sections: list[Section]
    runs: int
    skipped: int
    baseline_rule: str
    reference: bool


def configuration_label(configuration: dict) -> str:
    """Short name of a configuration: the device and how the work is spread."""
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
    return f"{device} {mode}"


def pooled(stats: list[Stat]) -> Stat:
    """Mean and population std over all samples behind several (mean, std, n)."""
    total = sum(s.n for s in stats)
    mean = sum(s.mean * s.n for s in stats) / total
    variance = sum(s.n * (s.std**2 + (s.mean - mean) ** 2) for s in stats) / total
    return Stat(mean, math.sqrt(variance), total)


def environment_line(environment: dict) -> str:
    count = environment.get("device_count")
    name = environment.get("device_name") or environment.get("device_type") or "unknown device"
    parts = [f"{name} ×{count}" if isinstance(count, int) and count > 1 else name]
    # torch's CUDA build shows in its version tag already; the cuda runtime matters only on GPUs.
    keys = ("python", "torch", "torchvision", "torch_xla") + (("cuda",) if environment.get("device_type") == "cuda" else ()) + ("image",)
    for key in keys:
        if environment.get(key):
            parts.append(f"{key} {environment[key]}")
    return ", ".join(parts)


def _row_from_runs(recipe: str, configuration: dict, runs: list[RunResult]) -> Row:
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
    )


def load_published() -> dict:
    text = resources.files("envkit").joinpath("data/published.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def published_rows(recipe: str) -> list[Row]:
    rows = []
    for rank, source in enumerate(load_published().get(recipe, []), start=1):
        for entry in source["rows"]:
            configuration = {
                "device": entry["device"], "cores": entry.get("cores"), "strategy": entry.get("strategy"),
                "parallel": entry.get("parallel"), "world_size": entry["world_size"],
                "model": entry.get("model", source.get("model")), "global_batch": entry.get("global_batch"),
                "per_device_batch": None, "image_size": source.get("image_size"), "dataset": source["dataset"],
            }
            # Published spreads come without a sample count (n=0); single published
            # numbers count as one sample so no spread is printed for them.
            stats = {name: Stat(entry[name][0], entry[name][1], 0) for name in ("iter_s", "epoch_s") if name in entry}
            stats.update({name: Stat(entry[name], 0.0, 1) for name in ("train_epoch_s", "test_epoch_s") if name in entry})
            total = entry.get("total_s")
            rows.append(Row(
                source=source["label"], source_short=source["short"], source_rank=rank, recipe=recipe, configuration=configuration, runs=0,
                total_s=Stat(total, 0.0, 1) if total is not None else None, first_epoch_s=None,
                stats=stats, test_accuracy=None, environment=source["note"],
            ))
    return rows


def _speedup_value(row: Row) -> float | None:
    metric = SPEEDUP_METRIC[row.recipe]
    if metric == "total_s":
        return row.total_s.mean if row.total_s else None
    stat = row.stats.get(metric) or row.stats.get("epoch_s")
    return stat.mean if stat else None


def _assign_speedups(rows: list[Row], baseline: str | None) -> None:
    groups: dict[tuple, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.comparable_key(), []).append(row)
    for group in groups.values():
        if baseline is None:
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


def build_report(results: list[RunResult], skipped: int = 0, baseline: str | None = None,
                 reference: bool = False) -> Report:
    """Group runs by recipe, dataset and configuration; add published rows on request."""
    grouped: dict[tuple, list[RunResult]] = {}
    for run in results:
        key = (run.recipe, json.dumps(run.configuration, sort_keys=True))
        grouped.setdefault(key, []).append(run)
    sections: dict[tuple, Section] = {}
    for (recipe, configuration_json), runs in grouped.items():
        configuration = json.loads(configuration_json)
        section = sections.setdefault((recipe, configuration["dataset"]), Section(recipe, configuration["dataset"]))
        section.rows.append(_row_from_runs(recipe, configuration, runs))
    if baseline is not None:
        labels = sorted({row.label for section in sections.values() for row in section.rows})
        if baseline not in labels:
            raise EnvkitError(f"--baseline {baseline!r} matches no configuration; choose one of: {', '.join(labels)}")
    for section in sections.values():
        if reference:
            section.rows.extend(published_rows(section.recipe))
        section.rows.sort(key=Row.sort_key)
        _assign_speedups(section.rows, baseline)
    rule = (f"the configuration {baseline} (--baseline)" if baseline is not None
            else "the first single-device configuration of each group (choose with --baseline)")
    return Report(
        sections=[sections[key] for key in sorted(sections)],
        runs=len(results), skipped=skipped, baseline_rule=rule, reference=reference,
    )


# ---- formatting -------------------------------------------------------------

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


def _speedup(row: Row) -> str:
    return NOT_APPLICABLE if row.speedup is None else f"{row.speedup:.2f}×"


def _optional(value) -> str:
    return NOT_APPLICABLE if value is None else str(value)


def _runs(row: Row) -> str:
    return str(row.runs) if row.source == OURS else NOT_APPLICABLE


def _md_cells(row: Row) -> list[str]:
    c = row.configuration
    total = row.total_s
    if row.recipe == "mnist":
        cells = [row.label, _optional(c.get("model")), _optional(c.get("global_batch")), _runs(row),
                 _mean_std(total), _mean_std(row.stats.get("iter_s"), 4), _mean_std(row.stats.get("epoch_s")),
                 _seconds(row.first_epoch_s), _mean_std(row.stats.get("steady_epoch_s")), _accuracy(row.test_accuracy), _speedup(row)]
    else:
        cells = [row.label, _optional(c.get("model")), _optional(c.get("global_batch")),
                 _optional(c.get("per_device_batch")), _optional(c.get("image_size")), _runs(row),
                 _mean_std(row.stats.get("train_epoch_s")), _mean_std(row.stats.get("test_epoch_s")),
                 _seconds(row.first_epoch_s), _mean_std(total), _accuracy(row.test_accuracy), _speedup(row)]
    cells.append(row.environment)
    return cells


MD_HEADERS = {
    "mnist": ["configuration", "model", "global batch", "runs", "total s", "s/iter (mean ± std)",
              "s/epoch (mean ± std)", "first epoch s", "later epochs s/epoch", "test accuracy", "speed-up (total)",
              "environment"],
    "cifar": ["configuration", "model", "global batch", "per-device batch", "image px", "runs",
              "train s/epoch", "test s/epoch", "first epoch s", "total s", "test accuracy",
              "speed-up (train epoch)", "environment"],
}
SPEEDUP_WITHIN = {"mnist": "the same model", "cifar": "the same model, global batch and image size"}


def _md_line(cells: list[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def format_markdown(report: Report) -> str:
    configurations = sum(1 for section in report.sections for row in section.rows if row.source == OURS)
    summary = f"{_count(report.runs, 'run')} in {_count(configurations, 'configuration')}"
    if report.skipped:
        summary += f"; {_count(report.skipped, 'file')} skipped (see warnings)"
    lines = ["# envkit comparison report", "", summary + ".", ""]
    for section in report.sections:
        lines += [f"## {section.recipe} · dataset {section.dataset}", ""]
        metric = SPEEDUP_METRIC_NAME[SPEEDUP_METRIC[section.recipe]]
        lines.append(
            f"Seconds are wall-clock; s/iter and s/epoch are mean ± std over all iterations/epochs of all runs. "
            f"Speed-up = baseline {metric} ÷ row {metric}, within "
            f"{SPEEDUP_WITHIN[section.recipe]}; baseline: {report.baseline_rule}."
        )
        if report.reference:
            lines.append("Rows whose source starts with \"published\" are the published numbers, not measured here.")
        lines.append("")
        headers = MD_HEADERS[section.recipe]
        if report.reference:
            headers = ["source"] + headers
        lines += [_md_line(headers), _md_line(["---"] * len(headers))]
        for row in section.rows:
            cells = _md_cells(row)
            lines.append(_md_line([row.source] + cells if report.reference else cells))
        lines.append("")
    return "\n".join(lines)


FLAT_FIELDS = (
    "source", "recipe", "dataset", "configuration", "device", "cores", "strategy", "parallel", "world_size",
    "model", "global_batch", "per_device_batch", "image_size", "runs", "total_s", "total_s_std",
    "iter_s_mean", "iter_s_std", "epoch_s_mean", "epoch_s_std", "first_epoch_s", "steady_epoch_s_mean", "steady_epoch_s_std",
    "train_epoch_s_mean", "train_epoch_s_std", "test_epoch_s_mean", "test_epoch_s_std",
    "test_accuracy", "speedup", "baseline", "environment",
)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def flat_rows(report: Report) -> list[dict]:
    """One flat record per row, shared by the csv and json formats."""
    records = []
    for section in report.sections:
        for row in section.rows:
            record = {"source": row.source, "recipe": row.recipe, "configuration": row.label, "runs": row.runs}
            record.update({key: row.configuration.get(key) for key in (
                "dataset", "device", "cores", "strategy", "parallel", "world_size",
                "model", "global_batch", "per_device_batch", "image_size")})
            record["total_s"] = _rounded(row.total_s.mean) if row.total_s else None
            record["total_s_std"] = _rounded(row.total_s.std) if row.total_s and row.runs > 1 else None
            for name in STAT_KEYS:
                stat = row.stats.get(name)
                record[f"{name}_mean"] = _rounded(stat.mean) if stat else None
                record[f"{name}_std"] = _rounded(stat.std) if stat else None
            record.update(
                first_epoch_s=_rounded(row.first_epoch_s), test_accuracy=_rounded(row.test_accuracy),
                speedup=_rounded(row.speedup), baseline=row.baseline, environment=row.environment,
            )
            records.append({key: record[key] for key in FLAT_FIELDS})
    return records


def format_csv(report: Report) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=FLAT_FIELDS, lineterminator="\n")
    writer.writeheader()
    for record in flat_rows(report):
        writer.writerow({key: "" if value is None else value for key, value in record.items()})
    return buffer.getvalue()


def format_json(report: Report) -> str:
    document = {
        "schema_version": 1, "runs": report.runs, "skipped": report.skipped,
        "baseline_rule": report.baseline_rule, "rows": flat_rows(report),
    }
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


FORMATTERS = {"md": format_markdown, "csv": format_csv, "json": format_json}


def render_report(report: Report, output_format: str) -> str:
    return FORMATTERS[output_format](report)

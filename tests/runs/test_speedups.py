"""One baseline and speed-up rule for a recipe's rows and a command's, in every format and on the page (issue 40 §4
and §6, issue 41 §1): the baseline chosen, the rule named, stand-ins and unchecked devices kept out, a verdict."""

from __future__ import annotations

import csv
import io
import json

import pytest
from paths import DATA
from run_records import notebook_block, record

from envkit.errors import EnvkitError
from envkit.runs.formats import render_report
from envkit.runs.page_adapter import page_from_report
from envkit.runs.report import build_report
from envkit.runs.results import load_results
from envkit.runs.welch import ratio_interval


def _report(results, **options):
    return build_report(load_results(results)[0], **options)


def _rows(report):
    (section,) = report.sections
    return {row.label: row for row in section.rows}


def test_a_recipe_section_without_a_single_device_row_has_the_first_checked_row_as_baseline():
    """Before: recipes took the world-size-1 row of each group (none here: no speed-up at all), commands the cpu
    row else the first; now one rule, and the caption names it."""
    report = build_report(load_results(DATA / "results" / "backends")[0])
    cifar = report.sections[0]
    assert [(row.label, row.baseline, row.verdict) for row in cifar.rows] == [
        ("cuda DDP×4", "cuda DDP×4", "baseline"),
        ("cuda DDP×8 (2 nodes)", "cuda DDP×4", "no verdict"),
    ]
    text = render_report(report, "md")
    assert "baseline: cuda DDP×4 (the first row, in the table's order, that ran with its device checked)" in text


def test_the_experiments_target_list_chooses_the_baseline_and_the_caption_says_so(tmp_path):
    """Before: a command's baseline was the cpu row whatever the experiment listed first."""
    config = tmp_path / "envkit.yaml"
    config.write_text(
        'targets:\n  cpu: {kind: cpu, torch: "2.9.0"}\n  cpu-1t: {kind: cpu, torch: "2.9.0"}\nexperiments:\n'
        "  train: {summary: s, command: [python, train.py], targets: [cpu-1t, cpu]}\n"
    )
    results = tmp_path / "results"
    for name, target, wall in (("a", "cpu", 10.0), ("b", "cpu", 11.0), ("c", "cpu-1t", 20.0), ("d", "cpu-1t", 21.0)):
        record(results, name, device="cpu", image=None, wall=wall, target=target)
    report = _report(results, config=config)
    rows = _rows(report)
    assert (rows["cpu-1t"].verdict, rows["cpu"].baseline, rows["cpu"].verdict) == ("baseline", "cpu-1t", "faster")
    assert rows["cpu"].speedup == (20.0 + 21.0) / (10.0 + 11.0)
    text = render_report(report, "md")
    assert "baseline: cpu-1t (the first target of the experiment's list (cpu-1t, cpu) that ran with its device" in text


def test_a_notebook_in_cpu_mode_and_an_unchecked_device_are_never_the_baseline_nor_in_a_speedup(tmp_path):
    """Issue 40 §2 and §4: before, a CPU-mode notebook run read `colab-t4`, device "(not checked)", and became the
    baseline (it sorted first); an unchecked row was a baseline too."""
    results = tmp_path / "results"
    unchecked = {"observed": False, "accelerator": None, "label": "cpu"}
    record(results, "a", device="cpu", image=None, wall=9.0, target="cpu-old", used=unchecked)
    record(results, "b", device="cpu", image=None, wall=30.0, target="cpu")
    cpu = {"observed": True, "accelerator": "cpu", "name": "Xeon", "count": None, "label": "cuda"}
    record(
        results, "c", device="cuda", image=None, wall=5.0, target="colab-t4", used=cpu, notebook=notebook_block(True)
    )
    report = _report(results, config=tmp_path / "envkit.yaml")
    rows = _rows(report)
    assert rows["colab-t4 (CPU mode)"].cpu_stand_in and rows["colab-t4 (CPU mode)"].speedup is None
    assert not rows["cpu-old"].device_checked and rows["cpu-old"].speedup is None
    assert (rows["cpu"].baseline, rows["cpu"].speedup) == ("cpu", 1.0)
    text = render_report(report, "md")
    assert "| colab-t4 (CPU mode) |" in text and "colab-t4 (CPU mode): runs of an accelerator's target" in text
    assert "such a row is kept out of the speed-ups" in text
    (target,) = [target for target in page_from_report(report, []).comparisons[0].targets if "CPU mode" in target.label]
    assert target.speedup is None
    with pytest.raises(EnvkitError, match=r"^--baseline 'cpu-old' a CPU stand-in or a device not checked, which is "):
        _report(results, baseline="cpu-old")


def _three_runs(results, target: str, walls: tuple[float, ...]) -> None:
    for index, wall in enumerate(walls):
        record(results, f"{target}-{index}", device="cpu", image=None, wall=wall, target=target)


def test_every_speedup_gets_a_verdict_from_the_runs(tmp_path):
    """Issue 40 §6: before, a speed-up was a bare ratio (± a propagated std on commands only)."""
    results = tmp_path / "results"
    _three_runs(results, "a-base", (10.0, 10.5, 9.5))
    _three_runs(results, "b-fast", (5.0, 5.2, 4.8))
    _three_runs(results, "c-slow", (20.0, 21.0, 19.0))
    _three_runs(results, "d-same", (9.0, 11.5, 10.0))
    record(results, "e-once", device="cpu", image=None, wall=5.0, target="e-once")
    rows = _rows(_report(results))
    verdicts = {label: row.verdict for label, row in rows.items()}
    assert verdicts == {
        "a-base": "baseline",
        "b-fast": "faster",
        "c-slow": "slower",
        "d-same": "no difference shown",
        "e-once": "no verdict",
    }
    assert rows["b-fast"].speedup_interval == ratio_interval([10.0, 10.5, 9.5], [5.0, 5.2, 4.8])
    assert rows["e-once"].speedup_interval is None


def test_markdown_csv_json_and_the_page_give_one_speedup_and_verdict(tmp_path):
    """Before: the page added a spread of its own to a recipe row's speed-up that markdown and csv lacked."""
    results = tmp_path / "results"
    _three_runs(results, "a-base", (10.0, 10.5, 9.5))
    _three_runs(results, "b-fast", (5.0, 5.2, 4.8))
    report = _report(results)
    low, high = _rows(report)["b-fast"].speedup_interval
    cell = f"2.00× faster (95% {low:.2f}–{high:.2f}; 3 and 3 runs)"
    assert f"| {cell} |" in render_report(report, "md")
    (flat,) = [
        row for row in csv.DictReader(io.StringIO(render_report(report, "csv"))) if row["configuration"] == "b-fast"
    ]
    assert (flat["speedup"], flat["speedup_verdict"]) == ("2.0", "faster")
    assert (float(flat["speedup_low"]), float(flat["speedup_high"])) == (round(low, 6), round(high, 6))
    (document,) = [row for row in json.loads(render_report(report, "json"))["rows"] if row["configuration"] == "b-fast"]
    assert (document["speedup_low"], document["speedup_high"]) == (round(low, 6), round(high, 6))
    page = page_from_report(report, []).comparisons[0]
    (target,) = [target for target in page.targets if target.label == "b-fast"]
    assert cell in target.cells and target.speedup == (2.0, low, high)
    assert page.baseline.startswith("a-base (the first row") and page.baseline in " ".join(page.intro)

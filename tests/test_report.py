"""`envkit report`: exact tables from hand-made result files, bad input, schema versions."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from envkit.cli import main
from envkit.errors import EnvkitError
from envkit.report import build_report, pooled, render_report
from envkit.results import Stat, load_results, parse, stat_of

RESULTS = Path(__file__).parent / "data" / "results" / "mixed"
GOLDEN = Path(__file__).parent / "golden" / "report"
BAD_FILES = ("mnist-no-timing.json", "mnist-truncated.json", "notes.json")


def check_golden(name: str, text: str, update: bool) -> None:
    path = GOLDEN / name
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name} differs (rerun with --update-golden if intended)"


@pytest.fixture(scope="module")
def mixed():
    return load_results(RESULTS)


@pytest.mark.parametrize("output_format", ["md", "csv", "json"])
@pytest.mark.parametrize("reference", [False, True], ids=["ours", "reference"])
def test_report_text_matches_golden(mixed, update_golden, output_format, reference):
    results, _ = mixed
    report = build_report(results, skipped=len(BAD_FILES), reference=reference)
    suffix = "-reference" if reference else ""
    check_golden(f"mixed{suffix}.{output_format}", render_report(report, output_format), update_golden)


def test_cli_prints_table_and_names_each_skipped_file(capsys):
    assert main(["report", str(RESULTS)]) == 0
    captured = capsys.readouterr()
    assert captured.out == (GOLDEN / "mixed.md").read_text(encoding="utf-8")
    warnings = captured.err.splitlines()
    for name in BAD_FILES:
        assert [line for line in warnings if line.startswith(f"envkit: warning: skipped {RESULTS / name}: ")]
    assert len([line for line in warnings if "skipped" in line]) == len(BAD_FILES)
    assert "3 files skipped (see warnings)" in captured.out


def test_skip_reasons_say_what_is_wrong(mixed):
    _, warnings = mixed
    reasons = {line.split(": ", 1)[0].rsplit("/", 1)[-1]: line.split(": ", 1)[1] for line in warnings if line.startswith("skipped")}
    assert reasons["mnist-truncated.json"].startswith("not valid JSON, partial or malformed")
    assert reasons["mnist-no-timing.json"] == "top level: 'timing' is a required property"
    assert reasons["notes.json"] == "not a results object"


def _broken(change) -> str:
    document = json.loads((RESULTS / "mnist-cpu-a.json").read_text())
    change(document)
    return json.dumps(document)


@pytest.mark.parametrize("change, reason", [
    (lambda d: d["timing"].update(total_s="12.5"), "timing.total_s: '12.5' is not of type 'number'"),
    (lambda d: d.update(recipe="imagenet"), "recipe: 'imagenet' is not one of ['cifar', 'mnist']"),
    (lambda d: d["configuration"].pop("dataset"), "configuration: 'dataset' is a required property"),
    (lambda d: d["metrics"].update(test_accuracy=97.5), "metrics.test_accuracy: 97.5 is greater than the maximum of 1"),
    (lambda d: d.update(schema_version="1"), "schema_version must be an integer, got '1'"),
], ids=["type", "recipe", "missing", "percent", "version"])
def test_unusable_file_reason_names_the_field(tmp_path, change, reason):
    with pytest.raises(ValueError) as error:
        parse(tmp_path / "x.json", _broken(change))
    assert str(error.value) == reason


def test_reference_rows_are_labelled_and_carry_published_numbers(mixed):
    results, _ = mixed
    text = render_report(build_report(results, reference=True), "md")
    rows = [line for line in text.splitlines() if line.startswith("| published")]
    official_8 = [r for r in rows if r.startswith("| published (Colab 2020, official-example notebook) | tpu xmp×8 |")]
    assert len(official_8) == 2  # once next to each mnist section (fake, real)
    assert "| 32.868 | 0.0190 ± 0.0430 | 2.362 ± 1.287 |" in official_8[0]
    assert "| 2.48× |" in official_8[0]  # 81.551 / 32.868, against the published 1-core row
    ddp_256 = [r for r in rows if "| cuda DDP×4 | mobilenet_v2 | 256 |" in r]
    assert len(ddp_256) == 1 and "| 13.520 | 1.110 |" in ddp_256[0] and "| 1.89× |" in ddp_256[0]
    ours = [line for line in text.splitlines() if line.startswith("| ours |")]
    assert len(ours) == 6 and not any("published" in r for r in ours)
    # without --reference nothing published appears
    assert "published" not in render_report(build_report(results), "md")


def test_repeated_runs_and_schema_versions_aggregate(mixed):
    results, warnings = mixed
    cpu_mnist = [r for r in results if r.recipe == "mnist" and r.configuration["device"] == "cpu"]
    assert sorted(r.run_name for r in cpu_mnist) == ["cpu-a", "cpu-b", "cpu-legacy"]
    legacy = next(r for r in cpu_mnist if r.run_name == "cpu-legacy")
    assert legacy.timing["epoch_s"] == Stat(6.5, pytest.approx(0.3), 2)  # upgraded from the raw list
    # version 2 is current now: the sample of a newer file is version 3
    assert any("cifar-cpu-none-v3.json: schema_version 3 is newer" in w for w in warnings)
    text = render_report(build_report(results), "md")
    assert "| cpu ×1 | mnist-net | 128 | 3 | 13.000 ± 0.408 |" in text


def test_pooled_stats_equal_stats_of_all_samples():
    first, second = [1.0, 2.0, 4.0], [3.0, 7.0]
    combined = pooled([Stat(**stat_of(first)), Stat(**stat_of(second))])
    expected = stat_of(first + second)
    assert combined.mean == pytest.approx(expected["mean"])
    assert combined.std == pytest.approx(expected["std"])
    assert combined.n == 5


def test_output_does_not_depend_on_file_order(mixed):
    results, _ = mixed
    # a second cpu configuration that differs only in batch: same label, same sort position
    cpu_mnist = next(r for r in results if r.run_name == "cpu-a")
    smaller_batch = dataclasses.replace(cpu_mnist, configuration={**cpu_mnist.configuration, "global_batch": 64})
    results = results + [smaller_batch]
    for output_format in ("md", "csv", "json"):
        forward = render_report(build_report(results, reference=True), output_format)
        backward = render_report(build_report(list(reversed(results)), reference=True), output_format)
        assert forward == backward


def test_baseline_is_selectable(mixed):
    results, _ = mixed
    text = render_report(build_report(results, baseline="cuda ×1"), "md")
    assert "baseline: the configuration cuda ×1 (--baseline)" in text
    assert "| tpu ×1 | mnist-net | 128 | 1 | 80.000 |" in text and "| 0.62× |" in text  # 50 / 80
    with pytest.raises(EnvkitError, match=r"--baseline 'gpu' matches no configuration; choose one of: cpu DDP×2, cpu ×1, "):
        build_report(results, baseline="gpu")


def test_empty_directory_says_so_and_exits_1(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"envkit: error: no results in {tmp_path}: it holds no *.json results files; "
                            "run a recipe, `envkit compare` or `envkit demo` first\n")


def test_only_bad_files_exit_1_after_warnings(tmp_path, capsys):
    for name in BAD_FILES:
        shutil.copy(RESULTS / name, tmp_path / name)
    assert main(["report", str(tmp_path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == len(BAD_FILES) + 1
    assert err[-1].startswith(f"envkit: error: no results in {tmp_path}: all 3 *.json files were skipped (see warnings); ")


@pytest.mark.parametrize("argv, message", [
    (["report", "/nonexistent/results"], "envkit: error: results directory /nonexistent/results does not exist"),
    (["report", str(RESULTS / "mnist-cpu-a.json")], f"envkit: error: results directory {RESULTS / 'mnist-cpu-a.json'} is not a directory"),
    (["report", str(RESULTS), "--plot", "chart.svg"], "envkit: error: --plot chart.svg: the plot is a PNG file"),
    (["report", str(RESULTS), "--baseline", "x"], "envkit: error: --baseline 'x' matches no configuration"),
])
def test_bad_input_is_one_line_exit_2(argv, message, capsys):
    assert main(argv) == 2
    error_lines = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(error_lines) == 1 and error_lines[0].startswith(message)


def test_unknown_format_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(RESULTS), "--format", "xlsx"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'xlsx'" in capsys.readouterr().err

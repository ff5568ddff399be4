"""`envkit report`: exact tables from hand-made result files, bad input, schema versions."""

from __future__ import annotations

import dataclasses
import json
import shutil

import paths
import pytest
from paths import DATA
from report_golden import check_golden

from envkit.cli import main
from envkit.errors import EnvkitError
from envkit.runs.formats import render_report
from envkit.runs.report import build_report
from envkit.runs.results import Stat, load_results, parse

RESULTS = DATA / "results" / "mixed"
GOLDEN = paths.GOLDEN / "report"
BAD_FILES = ("mnist-no-timing.json",)  # a results object this envkit cannot use: skipped, with a warning
# Files that hold no JSON object: no envkit's results file, so the report refuses them (see test_results.py).
NOT_OBJECTS = DATA / "results" / "not-objects"


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


def test_golden_numbers_recomputed_from_the_files_without_envkit():
    """The golden csv was written by the code it checks: its runs, total_s and accuracy are recomputed
    here from the JSON files with the json module alone (mean over the runs of one device, size and dataset)."""
    import csv
    import statistics

    groups: dict[tuple, list[dict]] = {}
    for path in sorted(RESULTS.glob("*.json")):
        document = json.loads(path.read_text())
        if "total_s" not in document.get("timing", {}):
            continue
        setup = document.get("configuration") or document["settings"]  # version 0 kept it in settings
        key = (document["recipe"], setup["dataset"], setup["device"], str(setup["world_size"]))
        groups.setdefault(key, []).append(document)
    rows = list(csv.DictReader((GOLDEN / "mixed.csv").read_text().splitlines()))
    assert len(rows) == len(groups) == 6
    for row in rows:
        runs = groups[(row["recipe"], row["dataset"], row["device"], row["world_size"])]
        assert int(row["runs"]) == len(runs), row["configuration"]
        assert float(row["total_s"]) == pytest.approx(statistics.mean(r["timing"]["total_s"] for r in runs), abs=1e-6)
        assert float(row["test_accuracy"]) == pytest.approx(
            statistics.mean(r["metrics"]["test_accuracy"] for r in runs), abs=1e-6
        )


def test_cli_prints_table_and_names_each_skipped_file(capsys):
    assert main(["report", str(RESULTS)]) == 0
    captured = capsys.readouterr()
    assert captured.out == (GOLDEN / "mixed.md").read_text(encoding="utf-8")
    warnings = captured.err.splitlines()
    for name in BAD_FILES:
        assert [line for line in warnings if line.startswith(f"envkit: warning: skipped {RESULTS / name}: ")]
    assert len([line for line in warnings if "skipped" in line]) == len(BAD_FILES)
    assert "1 file skipped (see warnings)" in captured.out


def test_skip_reasons_say_what_is_wrong(mixed):
    _, warnings = mixed
    reasons = {
        line.split(": ", 1)[0].rsplit("/", 1)[-1]: line.split(": ", 1)[1]
        for line in warnings
        if line.startswith("skipped")
    }
    assert reasons == {"mnist-no-timing.json": "top level: 'timing' is a required property"}


def _broken(change) -> str:
    document = json.loads((RESULTS / "mnist-cpu-a.json").read_text())
    change(document)
    return json.dumps(document)


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda d: d["timing"].update(total_s="12.5"), "timing.total_s: '12.5' is not of type 'number'"),
        (lambda d: d.update(recipe="imagenet"), "recipe: 'imagenet' is not one of ['cifar', 'mnist']"),
        (lambda d: d["configuration"].pop("dataset"), "configuration: 'dataset' is a required property"),
        (
            lambda d: d["metrics"].update(test_accuracy=97.5),
            "metrics.test_accuracy: 97.5 is greater than the maximum of 1",
        ),
        (lambda d: d.update(schema_version="1"), "schema_version must be an integer, got '1'"),
    ],
    ids=["type", "recipe", "missing", "percent", "version"],
)
def test_unusable_file_reason_names_the_field(tmp_path, change, reason):
    with pytest.raises(ValueError) as error:
        parse(tmp_path / "x.json", _broken(change))
    assert str(error.value) == reason


def test_reference_rows_are_labelled_and_carry_published_numbers(mixed):
    results, _ = mixed
    text = render_report(build_report(results, reference=True), "md")
    rows = [line for line in text.splitlines() if line.startswith("| published")]
    official_8 = [r for r in rows if r.startswith("| published (Colab 2020, official-example notebook) | tpu xmp×8 |")]
    assert len(official_8) == 1  # next to the real-data runs of its 10 epochs, not the fake-data ones
    assert "| 32.868 | 0.0190 ± 0.0430 | 2.362 ± 1.287 |" in official_8[0]
    # 81.551 / 32.868, against the published 1-core row: published numbers, no runs behind them to judge
    assert "| 2.48× published: no runs to judge |" in official_8[0]
    ddp_256 = [r for r in rows if "| cuda DDP×4 | mobilenet_v2 | 256 |" in r]
    assert (
        len(ddp_256) == 1
        and "| 13.520 | 1.110 |" in ddp_256[0]
        and "| 1.89× published: no runs to judge |" in ddp_256[0]
    )
    ours = [line for line in text.splitlines() if line.startswith("| ours |")]
    assert len(ours) == 6 and not any("published" in r for r in ours)
    # without --reference nothing published appears
    assert "published" not in render_report(build_report(results), "md")


def test_a_published_row_is_compared_only_with_runs_that_did_the_same_work(mixed):
    """A 4-step, 512-image 'epoch' on generated data beside a published full epoch of real MNIST made the CPU look
    faster than a T4 and a TPU."""
    results, _ = mixed
    report = build_report(results, reference=True)
    sources = {section.title: {row.source for row in section.rows} for section in report.sections}
    assert sources["mnist · dataset fake"] == {"ours"} and sources["cifar · dataset fake"] == {"ours"}
    assert len(sources["mnist · dataset real"]) == 3  # ours and both published sources: real data, 10 epochs
    # Published E2 (real CIFAR-10) stands apart, saying why; so does E1 once the real runs are short.
    apart = next(section for section in report.sections if section.apart)
    assert apart.title == "cifar · dataset real · published, compared with no run here"
    assert {row.source for row in apart.rows} == {"published (4 GPUs, PyTorch 1.7)"}
    assert apart.apart.startswith("The published rows did other work (real data, every train image) than every run ")
    short = [
        dataclasses.replace(run, settings={**run.settings, "max_steps": 4})
        if run.configuration["dataset"] == "real"
        else run
        for run in results
    ]
    text = render_report(build_report(short, reference=True), "md")
    assert "## mnist · dataset real · published, compared with no run here" in text
    assert (
        "The published rows did other work (real data, every train image, 10 epochs) than every run measured here "
        "(fake data, train images not recorded, 2 epochs; real data, every train image, at most 4 steps, 10 epochs)"
    ) in text
    real = text.split("## mnist · dataset real\n", 1)[1].split("\n## ", 1)[0]
    assert "| published" not in real


def test_a_recipes_runs_of_other_epochs_are_never_pooled(mixed):
    """Before: a row pooled 1-epoch and 2-epoch runs of one configuration (issue 32 §2)."""
    results, _ = mixed
    cpu_a = next(r for r in results if r.run_name == "cpu-a")
    longer = dataclasses.replace(cpu_a, run_name="cpu-a-3-epochs", settings={**cpu_a.settings, "epochs": 3})
    titles = [section.title for section in build_report(results + [longer]).sections if section.recipe == "mnist"]
    assert titles == ["mnist · dataset fake · 2 epochs", "mnist · dataset fake · 3 epochs", "mnist · dataset real"]
    fake = [s for s in build_report(results + [longer]).sections if s.title.startswith("mnist · dataset fake")]
    assert [row.runs for row in fake[1].rows] == [1]


def test_repeated_runs_and_schema_versions_aggregate(mixed):
    results, warnings = mixed
    cpu_mnist = [r for r in results if r.recipe == "mnist" and r.configuration["device"] == "cpu"]
    assert sorted(r.run_name for r in cpu_mnist) == ["cpu-a", "cpu-b", "cpu-legacy"]
    legacy = next(r for r in cpu_mnist if r.run_name == "cpu-legacy")
    assert legacy.timing["epoch_s"] == Stat(6.5, pytest.approx(0.3), 2)  # upgraded from the raw list
    # version 3 is current now: the sample of a newer file is version 4
    assert any("cifar-cpu-none-v4.json: schema_version 4 is newer" in w for w in warnings)
    text = render_report(build_report(results), "md")
    assert "| cpu ×1 | mnist-net | 128 | 3 | 13.000 ± 0.408 |" in text


def test_output_does_not_depend_on_file_order(mixed):
    results, _ = mixed
    # a second cpu configuration that differs only in batch: same label, same sort position
    cpu_mnist = next(r for r in results if r.run_name == "cpu-a")
    smaller_batch = dataclasses.replace(
        cpu_mnist, run_name="cpu-b64", configuration={**cpu_mnist.configuration, "global_batch": 64}
    )
    results = results + [smaller_batch]
    for output_format in ("md", "csv", "json"):
        forward = render_report(build_report(results, reference=True), output_format)
        backward = render_report(build_report(list(reversed(results)), reference=True), output_format)
        assert forward == backward


def test_baseline_is_selectable(mixed):
    results, _ = mixed
    text = render_report(build_report(results, baseline="cuda ×1"), "md")
    assert "baseline: cuda ×1 (named by --baseline)" in text
    assert (
        "| tpu ×1 | mnist-net | 128 | 1 | 80.000 |" in text and "| 0.62× no verdict (1 run against 1) |" in text
    )  # 50 / 80
    with pytest.raises(
        EnvkitError, match=r"--baseline 'gpu' matches no configuration; choose one of: cpu DDP×2, cpu ×1, "
    ):
        build_report(results, baseline="gpu")


def test_empty_directory_says_so_and_exits_1(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"envkit: error: no results in {tmp_path}: it holds no *.json results files; "
        "run a recipe, `envkit compare` or `envkit demo` first\n"
    )


def test_only_bad_files_exit_1_in_one_line(tmp_path, capsys):
    """One line naming the first bad file's reason (issue 28 §21: it was a warning per file plus the error)."""
    for name in ("a.json", "b.json"):
        shutil.copy(RESULTS / BAD_FILES[0], tmp_path / name)
    assert main(["report", str(tmp_path)]) == 1
    (err,) = capsys.readouterr().err.splitlines()
    assert err == (
        f"envkit: error: no results in {tmp_path}: none of its 2 *.json files is a results file (the first: "
        f"{tmp_path / 'a.json'}: top level: 'timing' is a required property); "
        "run a recipe, `envkit compare` or `envkit demo` first"
    )


@pytest.mark.parametrize("name", sorted(path.name for path in NOT_OBJECTS.iterdir()))
def test_a_file_that_holds_no_object_among_good_ones_is_refused(tmp_path, capsys, name):
    """Issue 25: a user's script that writes its own JSON into the results directory is one line, exit 2."""
    for path in RESULTS.glob("mnist-cpu-*.json"):
        shutil.copy(path, tmp_path / path.name)
    shutil.copy(NOT_OBJECTS / name, tmp_path / name)
    assert main(["report", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"envkit: error: {tmp_path / name} is not a results file (")
    assert "a results directory holds only results files, each a JSON object" in captured.err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["report", "/nonexistent/results"], "envkit: error: results directory /nonexistent/results does not exist"),
        (
            ["report", str(RESULTS / "mnist-cpu-a.json")],
            f"envkit: error: results directory {RESULTS / 'mnist-cpu-a.json'} is not a directory",
        ),
        (["report", str(RESULTS), "--plot", "chart.svg"], "envkit: error: --plot chart.svg: the plot is a PNG file"),
        (["report", str(RESULTS), "--baseline", "x"], "envkit: error: --baseline 'x' matches no configuration"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, message, capsys):
    assert main(argv) == 2
    error_lines = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(error_lines) == 1 and error_lines[0].startswith(message)


def test_unknown_format_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(RESULTS), "--format", "xlsx"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'xlsx'" in capsys.readouterr().err


# ---- environments, backends and nodes (schema version 2) ---------------------

BACKENDS = DATA / "results" / "backends"


def test_backends_and_nodes_side_by_side_match_golden(update_golden):
    results, warnings = load_results(BACKENDS)
    assert warnings == []
    check_golden("backends.md", render_report(build_report(results), "md"), update_golden)


def test_torch_tpu_row_sits_beside_torch_xla_and_is_named():
    results, _ = load_results(BACKENDS)
    rows = [
        line.split(" | ")[0]
        for line in render_report(build_report(results), "md").splitlines()
        if line.startswith("| tpu")
    ]
    assert rows == ["| tpu ×1", "| tpu ×1 (torch_tpu)", "| tpu xmp×8"]
    assert "| cuda DDP×8 (2 nodes) | resnet50 | 128 | 16 |" in render_report(build_report(results), "md")


def test_rows_of_differing_environments_are_marked():
    results, _ = load_results(BACKENDS)
    text = render_report(build_report(results), "md")
    assert (
        "| 1.20× no verdict (1 run against 1) | B | TPU v5e ×8, python 3.12.3, torch 2.13.0, torch_tpu 0.2.0," in text
    )
    assert (
        "env: these rows ran in 2 environments that differ in torch, backend and lock_sha256 "
        "(A = python 3.12, torch 2.9.0, backend torch_xla, lock_sha256 111111111111; "
    ) in text
    # the cifar section ran in one environment: no marker column there
    cifar = text.split("## cifar")[1].split("## mnist")[0]
    assert "| env |" not in cifar and "env:" not in cifar
    marks = {
        record["configuration"]: record["env"]
        for record in json.loads(render_report(build_report(results), "json"))["rows"]
    }
    assert marks == {
        "tpu ×1": "A",
        "tpu ×1 (torch_tpu)": "B",
        "tpu xmp×8": "A",
        "cuda DDP×4": None,
        "cuda DDP×8 (2 nodes)": None,
    }


def test_a_row_whose_runs_ran_in_two_environments_carries_both_marks():
    results, _ = load_results(BACKENDS)
    xla = next(r for r in results if r.run_name == "tpu-xla")
    other_python = dataclasses.replace(
        xla, run_name="tpu-xla-py311", environment={**xla.environment, "python": "3.11.9"}
    )
    report = build_report(results + [other_python])
    section = next(s for s in report.sections if s.recipe == "mnist")
    assert {row.label: row.mark for row in section.rows} == {
        "tpu ×1": "A,B",
        "tpu ×1 (torch_tpu)": "C",
        "tpu xmp×8": "B",
    }
    with pytest.raises(
        EnvkitError,
        match=r"^--strict: the mnist · dataset real runs come from 3 environments that differ in python, torch, backend",
    ):
        build_report(results + [other_python], strict=True)


def test_a_host_run_and_an_image_run_of_one_lock_and_python_are_one_environment():
    results, _ = load_results(BACKENDS)
    image = next(r for r in results if r.run_name == "tpu-xla")
    # The host's venv from the same lock: no image, another patch release of the same Python.
    host = dataclasses.replace(
        image,
        run_name="tpu-xla-host",
        environment={**image.environment, "python": "3.12.11", "image": None, "image_id": None},
    )
    section = next(s for s in build_report(results + [host]).sections if s.recipe == "mnist")
    assert {row.label: row.mark for row in section.rows} == {"tpu ×1": "A", "tpu ×1 (torch_tpu)": "B", "tpu xmp×8": "A"}
    # Another lock is another environment, though everything else agrees.
    other = dataclasses.replace(host, environment={**host.environment, "lock_sha256": "3" * 64})
    section = next(s for s in build_report(results + [other]).sections if s.recipe == "mnist")
    assert {row.label: row.mark for row in section.rows}["tpu ×1"] == "A,B"


def test_strict_refuses_differing_environments_in_one_line(capsys):
    assert main(["report", str(BACKENDS), "--strict"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "envkit: error: --strict: the mnist · dataset real runs come from 2 environments that differ in torch, backend and "
        "lock_sha256 (A = python 3.12, torch 2.9.0, backend torch_xla, lock_sha256 111111111111; B = python 3.12, "
        "torch 2.13.0, backend torch_tpu, lock_sha256 222222222222); report one environment's results, or leave out "
        "--strict to compare them marked"
    ]


def test_strict_compares_runs_of_one_environment(tmp_path, capsys):
    for path in BACKENDS.glob("cifar-*.json"):
        shutil.copy(path, tmp_path / path.name)
    assert main(["report", str(tmp_path), "--strict"]) == 0
    assert "| cuda DDP×8 (2 nodes) |" in capsys.readouterr().out
    # published rows are not an environment of ours: --reference with --strict still reports
    assert main(["report", str(tmp_path), "--strict", "--reference"]) == 0


# ---- the report's facts are data -------------------------------------------------


def test_report_data_names_known_recipes_columns_and_statistics():
    from envkit.runs.columns import COLUMNS, FLAT_FIELDS
    from envkit.runs.published import _drawable, _known, report_facts
    from envkit.runs.report import ROW_KEYS
    from envkit.runs.results import CONFIGURATION_KEYS, ENVIRONMENT_KEYS, KNOWN_RECIPES, STAT_KEYS

    facts = report_facts()
    assert sorted(facts["recipes"]) == sorted(KNOWN_RECIPES)
    for recipe in facts["recipes"].values():
        assert set(recipe["columns"]) <= set(COLUMNS) and "configuration" in recipe["columns"]
        assert not any(COLUMNS[key].from_settings or key == "run" for key in recipe["columns"]), (
            "experiment sections' only"
        )
        assert [key for panel in recipe["panels"] for key in panel] and all(
            set(panel) <= set(STAT_KEYS) for panel in recipe["panels"]
        )
        assert set(recipe["comparable_by"]) <= set(ROW_KEYS)
        assert recipe["speedup"]["metric"] in recipe["columns"]
    assert all(_known(key) for key in facts["command"]["columns"])
    assert all(_drawable(panel) for panel in facts["command"]["panels"])
    for section in [*facts["recipes"].values(), *facts["experiments"].values()]:
        for panel in section["panels"]:
            # every bar can be drawn, and a panel's bars share its y axis
            assert (
                panel and all(COLUMNS[key].measure for key in panel) and len({COLUMNS[key].axis for key in panel}) == 1
            )
    assert set(facts["environment_facts"]) <= set(CONFIGURATION_KEYS) | set(ENVIRONMENT_KEYS)
    assert set(STAT_KEYS) <= set(COLUMNS)
    assert len(FLAT_FIELDS) == len(set(FLAT_FIELDS))


def test_a_new_recipe_is_reported_from_data_alone(monkeypatch, tmp_path):
    """report.py and plot.py hold no per-recipe code: an entry in report.yaml is enough."""
    from envkit.runs import report as report_module
    from envkit.runs.plot import write_plot
    from envkit.runs.published import report_facts

    facts = report_facts()
    imagenet = {**facts["recipes"]["cifar"], "speedup": {"metric": "epoch_s", "name": "epoch"}, "tick": "{model}"}
    monkeypatch.setattr(
        report_module, "project_facts", lambda config: {**facts, "recipes": {**facts["recipes"], "imagenet": imagenet}}
    )
    results, _ = load_results(BACKENDS)
    runs = [dataclasses.replace(run, recipe="imagenet") for run in results if run.recipe == "cifar"]
    text = render_report(build_report(runs), "md")
    assert "## imagenet · dataset fake" in text and "Speed-up = baseline s/epoch ÷ row s/epoch" in text
    assert "| speed-up (epoch) |" in text
    write_plot(build_report(runs), tmp_path / "imagenet.png")
    assert (tmp_path / "imagenet.png").stat().st_size > 0


def test_a_cpu_count_reads_as_cpus_not_sockets():
    from envkit.runs.environments import environment_line

    assert environment_line({"device_type": "cpu", "device_name": "AMD EPYC", "device_count": 2}) == "AMD EPYC, 2 CPUs"
    assert environment_line({"device_type": "tpu", "device_name": "TPU v5e", "device_count": 8}) == "TPU v5e ×8"

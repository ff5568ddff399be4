"""E3, batch and learning-rate scaling over 8 replicas: the experiment, its report table and figure.

The fixtures (tests/data/results/e3/) are the four results files of one real run of
`e3-batch-scaling` on XLA:CPU's 8 virtual devices (10 epochs; distributions trimmed).
The slow test runs the experiment small for real, the way `make e3-batch-scaling
RECIPE_PYTHON=.venv-xla/bin/python` does, and reads what the report shows.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
from mnist_files import read_results, run_mnist
from paths import DATA, REPO_ROOT
from report_golden import check_golden
from xla_env import xla_python

from envkit.cli import main
from envkit.project.experiments import experiment
from envkit.runs.figures import close, measured_figure
from envkit.runs.formats import render_report
from envkit.runs.page_adapter import comparison_of
from envkit.runs.plot import write_plot
from envkit.runs.report import build_report
from envkit.runs.results import load_results

RESULTS = DATA / "results" / "e3"
MIXED = DATA / "results" / "mixed"
NAME = "e3-batch-scaling"


def _option(args: tuple[str, ...], option: str) -> str | None:
    return args[args.index(option) + 1] if option in args else None


def test_the_entry_is_e3s_four_runs():
    entry = experiment(NAME)
    assert (entry.kind, entry.recipe, entry.published) == ("tpu-vm", "mnist", "E3, 8-core TPU")
    # SPMD over every core: one process, the same command on a TPU and on XLA:CPU's virtual devices
    assert entry.args[:6] == ("--device", "tpu", "--cores", "all", "--strategy", "spmd")
    assert _option(entry.args, "--optimizer") == "sgd"
    # its size, which users may change: the generated data it was measured on, 10 epochs as E1
    assert entry.defaults == ("--dataset", "fake", "--fake-train-size", "4096", "--epochs", "10")
    rules = [
        (
            _option(run.args, "--per-device-batch"),
            _option(run.args, "--lr-scaling"),
            _option(run.args, "--warmup-epochs"),
        )
        for run in entry.runs
    ]
    assert rules == [("16", "none", "0"), ("16", "linear", "2"), ("128", "none", "0"), ("128", "linear", "2")]


def _rows(report, name=NAME):
    return [row for section in report.sections if section.experiment == name for row in section.rows]


@pytest.fixture(scope="module")
def e3_results():
    results, warnings = load_results(RESULTS)
    assert warnings == [] and len(results) == 4
    return results


def test_report_table_matches_golden(e3_results, update_golden):
    check_golden("e3.md", render_report(build_report(e3_results), "md"), update_golden)


def test_each_run_is_a_row_in_the_tables_order_with_its_learning_rate_rule(e3_results):
    report = build_report(e3_results)
    assert [section.title for section in report.sections] == ["E3: batch and learning-rate scaling · dataset fake"]
    rows = _rows(report)
    assert [
        (
            row.run,
            row.configuration["global_batch"],
            row.settings["lr_scaling"],
            row.settings["warmup_epochs"],
            row.settings["effective_lr"],
        )
        for row in rows
    ] == [
        ("b16", 128, "none", 0, 0.01),
        ("b16-scaled", 128, "linear", 2, 0.01),
        ("b128", 1024, "none", 0, 0.01),
        ("b128-scaled", 1024, "linear", 2, 0.08),
    ]
    assert all(row.label == "tpu SPMD×8" and row.speedup is None for row in rows)


def test_the_real_run_shows_the_lesson(e3_results):
    # Measured here, not made up: 8x the per-replica batch at the same learning rate learns worse in
    # the same epochs; scaling the rate linearly, with warm-up, recovers most of it.
    accuracy = {row.run: row.test_accuracy for row in _rows(build_report(e3_results))}
    assert accuracy["b128"] < accuracy["b16"] - 0.15
    assert accuracy["b128-scaled"] > accuracy["b128"] + 0.15
    assert accuracy["b128-scaled"] > accuracy["b16"] - 0.05


def test_csv_and_json_name_the_experiment_and_run(e3_results):
    records = json.loads(render_report(build_report(e3_results), "json"))["rows"]
    assert [(r["experiment"], r["run"], r["per_device_batch"], r["lr_scaling"]) for r in records] == [
        (NAME, "b16", 16, "none"),
        (NAME, "b16-scaled", 16, "linear"),
        (NAME, "b128", 128, "none"),
        (NAME, "b128-scaled", 128, "linear"),
    ]
    header = render_report(build_report(e3_results), "csv").splitlines()[0].split(",")
    assert header[-6:] == ["experiment", "run", "lr_scaling", "warmup_epochs", "effective_lr", "epochs"]
    # Issue 40 §11: only the columns with values in its rows (E3 has no speed-up, and is no command's)
    assert not {"speedup", "speedup_beyond", "speedup_verdict", "wall_time_s", "parallel"} & set(header)


def test_a_repeated_run_pools_into_its_row_and_another_rule_does_not(e3_results):
    b128 = next(run for run in e3_results if run.run_name == f"{NAME}-b128")
    again = dataclasses.replace(b128, run_name=f"{NAME}-b128-2")  # write_results' name for the second run
    warmer = dataclasses.replace(b128, run_name=f"{NAME}-b128-3", settings={**b128.settings, "warmup_epochs": 5})
    rows = _rows(build_report(e3_results + [again, warmer]))
    assert [(row.run, row.runs, row.settings["warmup_epochs"]) for row in rows] == [
        ("b16", 1, 0),
        ("b16-scaled", 1, 2),
        ("b128", 2, 0),
        ("b128", 1, 5),
        ("b128-scaled", 1, 2),
    ]


def test_runs_without_settings_or_of_no_experiment_stay_in_the_recipes_section(e3_results):
    b16 = next(run for run in e3_results if run.run_name == f"{NAME}-b16")
    report = build_report(
        [dataclasses.replace(b16, settings={}), dataclasses.replace(b16, settings={**b16.settings, "run_name": "mine"})]
    )
    assert [(section.title, section.experiment, len(section.rows)) for section in report.sections] == [
        ("mnist · dataset fake", None, 1)
    ]


def test_e1_and_e3_results_side_by_side_keep_their_own_sections(e3_results):
    mixed, _ = load_results(MIXED)
    text = render_report(build_report(mixed + e3_results), "md")
    assert (
        text.count("## mnist · dataset fake") == 1
        and text.count("## E3: batch and learning-rate scaling · dataset fake") == 1
    )
    assert text.index("## mnist · dataset real") < text.index("## E3")  # experiments after the recipes
    assert "| b128-scaled | tpu SPMD×8 | 128 | 1024 | linear | 2 | 0.08 | 10 | 1 |" in text


def test_figure_is_accuracy_beside_seconds_per_epoch(e3_results, tmp_path):
    from matplotlib import image

    path = tmp_path / "e3.png"
    assert main(["report", str(RESULTS), "--plot", str(path)]) == 0
    report = build_report(e3_results)
    (section,) = report.sections
    figure = measured_figure(comparison_of(section, report, drawn=True))
    assert [axes.get_xlabel() for axes in figure.drawn.axes] == ["test accuracy (%)", "seconds per epoch (s)"]
    close([figure])
    assert image.imread(path).shape[0] > 0
    write_plot(build_report(e3_results), tmp_path / "again.png")
    assert (tmp_path / "again.png").read_bytes() == path.read_bytes()


def test_mnist_records_the_optimizer_it_trained_with(tmp_path):
    done = run_mnist(
        "--dataset",
        "fake",
        "--fake-train-size",
        "64",
        "--fake-test-size",
        "32",
        "--per-device-batch",
        "32",
        "--epochs",
        "1",
        "--optimizer",
        "sgd",
        "--lr",
        "0.01",
        "--quiet",
        "--results-dir",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    settings = read_results(tmp_path, "cpu")["settings"]
    assert (settings["optimizer"], settings["momentum"], settings["effective_lr"]) == (
        "sgd",
        0.9,
        0.0025,
    )  # 0.01 x 32/128


@pytest.mark.slow
@pytest.mark.xla
def test_e3_runs_small_on_xla_cpu_and_the_report_shows_it(tmp_path):
    """The experiment for real over 8 XLA:CPU devices, 2 epochs of 2048 images (about 3 minutes on 2 cores)."""
    python = xla_python()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "8"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "envkit",
            "experiment",
            "--python",
            python,
            "--results-dir",
            str(tmp_path),
            NAME,
            "--",
            "--epochs",
            "2",
            "--fake-train-size",
            "2048",
            "--fake-test-size",
            "512",
            "--quiet",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "envkit",
            "report",
            str(tmp_path),
            "--format",
            "json",
            "--plot",
            str(tmp_path / "e3.png"),
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0, report.stderr
    rows = json.loads(report.stdout)["rows"]
    assert [
        (
            r["run"],
            r["configuration"],
            r["world_size"],
            r["global_batch"],
            r["effective_lr"],
            r["warmup_epochs"],
            r["epochs"],
        )
        for r in rows
    ] == [
        ("b16", "tpu SPMD×8", 8, 128, 0.01, 0, 2),
        ("b16-scaled", "tpu SPMD×8", 8, 128, 0.01, 2, 2),
        ("b128", "tpu SPMD×8", 8, 1024, 0.01, 0, 2),
        ("b128-scaled", "tpu SPMD×8", 8, 1024, 0.08, 2, 2),
    ]
    accuracy = {r["run"]: r["test_accuracy"] for r in rows}
    # 16 steps an epoch against 2 at the same learning rate
    assert accuracy["b16"] > accuracy["b128"]
    assert all(r["environment"].startswith("XLA:CPU ×8") and r["epoch_s_mean"] > 0 for r in rows)
    assert (tmp_path / "e3.png").stat().st_size > 20_000

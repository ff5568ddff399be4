"""The report for any command (issue 25 §7): the run wrapper's records, grouped by experiment and place."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from results_contract import assert_valid_results
from run_records import record

from envkit.cli import main
from envkit.errors import EnvkitError
from envkit.runs.formats import render_report
from envkit.runs.published import project_facts
from envkit.runs.report import build_report
from envkit.runs.results import load_results
from envkit.runs.target_locks import current_locks
from envkit.support import provenance

ENVIRONMENT = "a device, python 3.11.7, torch 2.13.0, image {image}, lock abababababab"


@pytest.fixture
def runs(tmp_path) -> Path:
    """Two cpu runs, a cuda run and a failed cuda run of `train`."""
    results = tmp_path / "results"
    metrics = ({"acc": 0.5, "train": {"loss": 2}}, {"acc": 0.7, "train": {"loss": 1}})
    record(results, "a", device="cpu", image="envkit-cpu:latest", wall=10.0, metrics=metrics[0])
    record(results, "b", device="cpu", image="envkit-cpu:latest", wall=12.0, metrics=metrics[1])
    record(results, "c", device="cuda", image="envkit-cuda:latest", wall=2.75, metrics={"acc": 0.9})
    record(results, "d", device="cuda", image="envkit-cuda:latest", wall=99.0, status=1)
    return results


def test_a_command_experiments_csv_lists_only_the_columns_with_values(runs):
    """Issue 40 §11: before, the csv of a command experiment had 56 columns, most of them a recipe's, all empty."""
    header = render_report(build_report(load_results(runs)[0]), "csv").splitlines()[0].split(",")
    assert header == [
        "source",
        "configuration",
        "device",
        "runs",
        "speedup",
        "baseline",
        "environment",
        "experiment",
        "speedup_low",
        "speedup_high",
        "speedup_verdict",
        "failed",
        "wall_time_s",
        "wall_time_s_std",
        "device_used",
        "lock",
        "metrics.acc_mean",
        "metrics.acc_std",
        "metrics.train.loss_mean",
        "metrics.train.loss_std",
    ]
    document = json.loads(render_report(build_report(load_results(runs)[0]), "json"))
    assert set(document["rows"][0]) == set(header)


def test_a_commands_record_keeps_the_generic_core_of_the_schema(tmp_path):
    """Before: 'recipe' and 'configuration' were required, so every such record was refused."""
    assert_valid_results(record(tmp_path, "a", device="cpu", image=None, wall=1.0, metrics={"acc": 1}))
    without_run = record(tmp_path, "b", device="cpu", image=None, wall=1.0)
    del without_run["run"]
    (tmp_path / "b.json").write_text(json.dumps(without_run))
    _, warnings = load_results(tmp_path)
    assert warnings == [f"skipped {tmp_path / 'b.json'}: top level: 'run' is a required property"]


def test_what_the_run_wrapper_writes_validates_and_reports(tmp_path, capsys):
    """The wrapper itself, on a script that writes dvclive's metrics.json where ENVKIT_METRICS_DIR says."""
    (tmp_path / "train.py").write_text(
        "import json, os, pathlib\n"
        "(pathlib.Path(os.environ['ENVKIT_METRICS_DIR']) / 'metrics.json').write_text(json.dumps({'acc': 0.5}))\n"
    )
    environment = {"PATH": os.environ["PATH"], "ENVKIT_RESULTS_DIR": str(tmp_path / "results"), "ENVKIT_DEVICE": "cpu"}
    command = [sys.executable, provenance.__file__, sys.executable, "train.py"]
    subprocess.run(command, cwd=tmp_path, env=environment, check=True)
    (path,) = (tmp_path / "results").glob("*.json")
    assert_valid_results(path)
    assert main(["report", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert (
        "## experiment train\n" in out and "| where | runs | failed | wall time s | acc | speed-up (wall time) |" in out
    )


def test_the_wrappers_runs_as_two_targets_of_one_kind_are_two_rows_of_one_comparison(tmp_path):
    """Before: the wrapper recorded no target, so two cpu targets' runs on one host were one row, "cpu on host"."""
    (tmp_path / "train.py").write_text("print('Accuracy: 1')\n")
    for target in ("cpu-a", "cpu-b"):
        environment = {
            "PATH": os.environ["PATH"],
            "ENVKIT_RESULTS_DIR": str(tmp_path / "results"),
            "ENVKIT_DEVICE": "cpu",
            "ENVKIT_TARGET": target,
        }
        command = [sys.executable, provenance.__file__, sys.executable, "train.py"]
        subprocess.run(command, cwd=tmp_path, env=environment, check=True, capture_output=True)
    (section,) = _sections(tmp_path / "results")
    assert [(row.label, row.runs) for row in section.rows] == [("cpu-a", 1), ("cpu-b", 1)]


def test_a_run_started_without_a_target_is_labelled_where_it_ran(tmp_path):
    results = tmp_path / "results"
    for name, target in (("a", None), ("b", "cpu-a")):
        document = record(results, name, device="cpu", image=None, wall=1.0)
        document["run"]["target"] = target
        (results / f"{name}.json").write_text(json.dumps(document))
    (section,) = _sections(results)
    assert sorted(row.label for row in section.rows) == ["cpu on box", "cpu-a"]


def test_without_a_cpu_run_the_first_place_is_the_baseline(runs):
    results, _ = load_results(runs)
    cuda = [run for run in results if run.environment["device_type"] == "cuda"]
    text = render_report(build_report(cuda), "md")
    assert "baseline: cuda on envkit-cuda:latest" in text and "| 1.00× baseline |" in text


def test_csv_and_json_carry_wall_time_and_every_metric(runs, capsys):
    assert main(["report", str(runs), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    cpu = next(row for row in rows if row["configuration"] == "cpu on envkit-cpu:latest")
    assert (cpu["experiment"], cpu["runs"], cpu["failed"], cpu["wall_time_s"], cpu["wall_time_s_std"]) == (
        "train",
        "2",
        "0",
        "11.0",
        "1.0",
    )
    assert (cpu["metrics.acc_mean"], cpu["metrics.train.loss_std"], cpu["speedup"]) == ("0.6", "0.5", "1.0")
    assert main(["report", str(runs), "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    cuda = next(row for row in document["rows"] if row["configuration"] == "cuda on envkit-cuda:latest")
    assert cuda["failed"] == 1 and cuda["metrics.acc_mean"] == 0.9 and cuda["metrics.train.loss_mean"] is None


def test_the_plot_draws_wall_time_and_each_metric(runs, tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib import image

    from envkit.runs.figures import close, measured_figure
    from envkit.runs.page_adapter import comparison_of, panels
    from envkit.runs.plot import write_plot

    report = build_report(load_results(runs)[0])
    (section,) = report.sections
    assert [[key for key, _ in bars] for _, bars in panels(section)] == [
        ["wall_time_s"],
        ["metrics.acc"],
        ["metrics.train.loss"],
    ]
    figure = measured_figure(comparison_of(section, report, drawn=True))
    assert [axes.get_xlabel() for axes in figure.drawn.axes] == ["wall time (s)", "acc", "train.loss"]
    close([figure])
    path = tmp_path / "train.png"
    write_plot(report, path)
    assert image.imread(path).shape[0] > 0


def test_a_projects_report_yaml_overrides_the_columns(runs, tmp_path):
    config = tmp_path / "envkit.yaml"
    (tmp_path / "report.yaml").write_text(
        "experiments:\n  train:\n    title: Training on every target\n    columns: [where, wall_time_s, metrics.acc]\n"
    )
    text = render_report(build_report(load_results(runs)[0], config=config), "md")
    assert "## Training on every target\n" in text
    assert "| where | wall time s | acc |\n" in text and "train.loss" not in text
    # the rest of the entry is envkit's default for a command: its speed-up and plot panels
    assert project_facts(config)["experiments"]["train"]["panels"] == [["wall_time_s"], "metrics"]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("- train\n", "top level: a mapping of recipes: and experiments:"),
        ("experiments:\n  train:\n    columns: [wall]\n", "experiments.train.columns: a list of columns, each one of:"),
        ("experiments:\n  train:\n    colums: [where]\n", "experiments.train: a mapping of title, intro, columns"),
        ("experiments:\n  train:\n    panels: [[runs]]\n", "experiments.train.panels: a list of panels"),
        ("recipes:\n  imagenet: {}\n", "recipes.imagenet: not a recipe the results schema knows (mnist, cifar)"),
        ("experiments: [train]\n", "experiments: a mapping of names to what their sections show"),
    ],
    ids=["list", "unknown-column", "misspelt-key", "unmeasured-panel", "unknown-recipe", "experiments-list"],
)
def test_a_bad_report_yaml_is_one_line_naming_it(runs, tmp_path, capsys, text, problem):
    (tmp_path / "report.yaml").write_text(text)
    config = tmp_path / "envkit.yaml"
    with pytest.raises(EnvkitError) as error:
        project_facts(config)
    assert str(error.value).startswith(f"{tmp_path / 'report.yaml'}: {problem}")
    assert main(["report", str(runs), "--config", str(config)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


# ---- comparisons (issue 32 §2): the runs that did the same work, a row per target, each on its own lock


def _sections(results_dir: Path):
    return build_report(load_results(results_dir)[0]).sections


def test_runs_of_other_arguments_are_their_own_comparison_and_the_title_says_so(tmp_path):
    """Before: one row pooled --epochs 1 and --epochs 2 runs (24.8 ± 5.1 s)."""
    results = tmp_path / "results"
    record(results, "a", device="cpu", image=None, wall=20.0, argv=["python", "train.py", "--epochs", "1"])
    # torchrun's launcher words and another interpreter are no difference in the work
    record(results, "b", device="cpu", image=None, wall=22.0, argv=["/v/bin/python", "train.py", "--epochs", "1"])
    record(results, "c", device="cpu", image=None, wall=40.0, argv=["torchrun", "--nproc-per-node=1", "train.py"])
    one, other = _sections(results)
    assert [row.runs for row in one.rows] == [1] and one.work["arguments"] == []
    assert [row.runs for row in other.rows] == [2] and other.work["arguments"] == ["--epochs", "1"]
    assert other.title == "experiment train · arguments `--epochs 1`"
    text = render_report(build_report(load_results(results)[0]), "md")
    assert "## experiment train · arguments `--epochs 1`\n" in text and "## experiment train · arguments none" in text
    assert "Not pooled with the other runs of `train`: they differ in arguments `--epochs 1`" in text


def test_a_targets_older_lock_is_a_comparison_of_its_own(tmp_path):
    """Before: a locked run and an unlocked run of one target were one row."""
    results = tmp_path / "results"
    record(results, "a", device="cpu", image=None, wall=10.0, target="cpu")
    record(results, "b", device="cuda", image=None, wall=2.0, target="cuda", started_at="2026-11-26T10:00:00+00:00")
    record(results, "c", device="cuda", image=None, wall=9.0, target="cuda", lock=None)
    # Outside a project nothing says which lock is the target's: the newest runs' joins, the other is not "older".
    main_comparison, apart = build_report(load_results(results)[0], config=tmp_path / "envkit.yaml").sections
    assert [(row.label, row.lock, row.speedup) for row in main_comparison.rows] == [
        ("cpu", "ab" * 32, 1.0),
        ("cuda", "ab" * 32, 5.0),
    ]
    assert [(row.label, row.lock) for row in apart.rows] == [("cuda", None)]
    assert apart.differs == ["cuda on no lock (not the lock of the target's newest runs)"]


def _project_with_lock(root: Path, target: str) -> tuple[Path, str]:
    """A project whose ``target`` has a lock file; its path and the lock's sha256."""
    config = root / "envkit.yaml"
    config.write_text(f'targets:\n  {target}: {{kind: cpu, torch: "2.9.0"}}\n')
    lock = root / "docker" / target / "requirements.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("torch==2.9.0\n")
    return config, hashlib.sha256(lock.read_bytes()).hexdigest()


def test_a_run_on_its_targets_current_lock_joins_though_others_are_newer(tmp_path, capsys):
    """Bug B4: a run on the target's current lock was titled 'an older lock of the target'."""
    config, current = _project_with_lock(tmp_path, "cpu")
    results = tmp_path / "results"
    record(results, "a", device="cpu", image=None, wall=10.0, target="cpu", lock=current)
    record(results, "b", device="cpu", image=None, wall=9.0, target="cpu", started_at="2026-11-26T10:00:00+00:00")
    runs = load_results(results)[0]
    assert current_locks(config, {"cpu", "gone", None}) == {"cpu": current}  # a target the project lacks: none
    main_comparison, apart = build_report(runs, config=config, current_locks=current_locks(config, {"cpu"})).sections
    assert [(row.label, row.lock) for row in main_comparison.rows] == [("cpu", current)]
    title = f"cpu on lock {'ab' * 6} (the target's current lock is {current[:12]})"
    assert apart.differs == [title]
    assert main(["report", str(results), "--config", str(config)]) == 0
    assert f"## experiment train · {title}\n" in capsys.readouterr().out


def test_runs_that_name_no_target_never_claim_an_older_lock(tmp_path):
    """Bug B4: records without a target were told against the cpu target's lock, and called 'older'."""
    config, _ = _project_with_lock(tmp_path, "cpu")
    results = tmp_path / "results"
    record(results, "a", device="cpu", image=None, wall=10.0, lock="cd" * 32)
    record(results, "b", device="cpu", image=None, wall=9.0, started_at="2026-11-26T10:00:00+00:00")
    runs = load_results(results)[0]
    titles = [section.title for section in build_report(runs, current_locks=current_locks(config, {None})).sections]
    assert titles == [
        "experiment train",
        f"experiment train · cpu on box on lock {'cd' * 6} (not the lock of the newest runs there; the records "
        "name no target)",
    ]
    assert not any("older" in title for title in titles)


def test_records_of_one_experiment_on_several_targets_form_one_comparison_a_row_per_target(tmp_path):
    results = tmp_path / "results"
    for name, target, device, wall in [
        ("a", "cpu", "cpu", 8.0),
        ("b", "cpu", "cpu", 12.0),
        ("c", "tpu-vm", "tpu", 2.0),
    ]:
        record(results, name, device=device, image=None, wall=wall, target=target)
    (section,) = _sections(results)
    assert [(row.label, row.runs, row.speedup) for row in section.rows] == [("cpu", 2, 1.0), ("tpu-vm", 1, 5.0)]
    # one tpu-vm run against two cpu runs: no interval, no verdict, and the cell says so
    assert (section.rows[1].speedup_interval, section.rows[1].verdict) == (None, "no verdict")
    text = render_report(build_report(load_results(results)[0]), "md")
    assert "| tpu-vm | 1 | 0 | 2 | 5.00× no verdict (1 run against 2) |" in text


def test_a_gpu_targets_run_that_initialised_no_accelerator_is_a_cpu_run_without_a_speedup(tmp_path):
    """Before: a CPU run of the cuda target read `cuda`, and its wall time joined the target's speed-up."""
    results = tmp_path / "results"
    record(results, "a", device="cpu", image=None, wall=10.0, target="cpu")
    gpu = {"observed": True, "accelerator": "cuda", "name": "NVIDIA H100", "count": 1, "label": "cuda"}
    record(results, "b", device="cuda", image=None, wall=1.0, target="cuda", used=gpu)
    # The wrapper records the device it saw in the environment too: the cpu, beside the label's cuda.
    cpu = {"observed": True, "accelerator": "cpu", "name": "AMD EPYC", "count": None, "label": "cuda"}
    record(results, "c", device="cpu", image=None, wall=11.0, target="cuda", used=cpu)
    (section,) = _sections(results)
    rows = {row.label: row for row in section.rows}
    assert rows["cuda"].device == "NVIDIA H100" and rows["cuda"].speedup == 10.0 and rows["cuda"].runs == 1
    stand_in = rows["cuda (CPU run)"]
    assert stand_in.cpu_stand_in and stand_in.speedup is None and stand_in.device == "AMD EPYC (no accelerator)"
    assert stand_in.configuration["device"] == "cpu"
    text = render_report(build_report(load_results(results)[0]), "md")
    assert "cuda (CPU run): runs of an accelerator's target whose device block shows no accelerator" in text


def test_a_counter_is_no_metric_and_series_are_curves_with_the_first_step_apart(tmp_path):
    """Before: dvclive's step was tabled and plotted as a metric, and the acc series was never drawn."""
    results = tmp_path / "results"
    series = {"acc": {"step": [0, 1, 2, 3], "value": [0.1, 0.5, 0.6, 0.7]}, "step": {"step": [0], "value": [0]}}
    record(results, "a", device="cpu", image=None, wall=5.0, metrics={"acc": 0.7, "step": 3}, series=series)
    (section,) = _sections(results)
    (row,) = section.rows
    assert list(row.metrics) == ["acc"] and list(row.curves) == ["acc"]
    curve = row.curves["acc"]
    assert curve.steps == (0, 1, 2, 3) and curve.first.mean == 0.1
    assert (curve.final.mean, curve.final.n) == (0.7, 1)
    text = render_report(build_report(load_results(results)[0]), "md")
    assert "| step |" not in text and "| where | series | runs | steps | final value | first step |" in text
    assert "| cpu on box | acc | 1 | steps 0–3 | 0.7 | 0.1 |" in text


def test_the_series_table_gives_each_runs_final_value_across_runs_not_the_spread_over_steps(tmp_path):
    """Issue 40 §9: before, three identical runs of a falling loss read "steady state 0.2077 ± 0.41", the spread
    over steps 1-29; now the final value and its spread across the runs (0 here), the first step apart."""
    results = tmp_path / "results"
    loss = [1.7 * 0.8**step for step in range(30)]
    for name in ("a", "b", "c"):
        record(
            results, name, device="cpu", image=None, wall=5.0, series={"loss": {"step": list(range(30)), "value": loss}}
        )
    text = render_report(build_report(load_results(results)[0]), "md")
    assert f"| cpu on box | loss | 3 | steps 0–29 | {loss[-1]:.4g} ± 0 | 1.7 ± 0 |" in text
    assert "each run's final value, mean ± std across the runs" in text


def test_a_long_series_is_a_bounded_curve(tmp_path):
    from envkit.runs.rows import CURVE_POINTS

    results = tmp_path / "results"
    steps = list(range(10_000))
    record(results, "a", device="cpu", image=None, wall=5.0, series={"loss": {"step": steps, "value": steps}})
    (section,) = _sections(results)
    curve = section.rows[0].curves["loss"]
    assert len(curve.steps) <= CURVE_POINTS and curve.steps[0] == 0 and curve.stride == 50


def test_the_plot_draws_series_as_curves_and_says_what_it_leaves_out(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from envkit.runs import plot
    from envkit.runs.figures import MAX_SECTIONS, png_bytes

    results = tmp_path / "results"
    series = {"acc": {"step": [0, 1, 2], "value": [0.1, 0.5, 0.6]}}
    for index in range(MAX_SECTIONS + 2):
        argv = ["python", "train.py", "--seed", str(index)]
        record(results, f"r{index}", device="cpu", image=None, wall=1.0 + index, argv=argv, series=series)
    report = build_report(load_results(results)[0])
    saved = []
    # The figures, not the title lines above them (a title line has no caption).
    monkeypatch.setattr(
        plot, "png_bytes", lambda f, dpi: saved.append(f.title if f.caption else "") or png_bytes(f, dpi)
    )
    assert plot.write_plot(report, tmp_path / "plot.png") == [
        f"2 sections after the first {MAX_SECTIONS}: experiment train · arguments `--seed 8`, "
        "experiment train · arguments "
        "`--seed 9`"
    ]
    assert saved.count("acc") == MAX_SECTIONS  # each drawn comparison's series as a curve


def test_data_that_differs_is_its_own_comparison(tmp_path):
    results = tmp_path / "results"
    record(results, "a", device="cpu", image=None, wall=1.0, data={"mnist": "sha256:aa"})
    record(results, "b", device="cpu", image=None, wall=1.0, data={"mnist": "sha256:bb"})
    titles = [section.title for section in _sections(results)]
    assert titles == [
        'experiment train · data {"mnist": "sha256:aa"}',
        'experiment train · data {"mnist": "sha256:bb"}',
    ]


# ---- wrong answers (issue 33 §10): NaN, partial metrics, copies, a newline in a name


def test_a_nan_is_counted_and_said_never_dropped(tmp_path, capsys):
    """Before: loss 0.5, 0.7 and NaN read `runs 3 | failed 0 | loss 0.6 ± 0.1`."""
    results = tmp_path / "results"
    for name, loss in (("a", 0.5), ("b", 0.7), ("c", float("nan"))):
        record(results, name, device="cpu", image=None, wall=1.0, metrics={"loss": loss}, started_at=f"{name}")
    assert main(["report", str(results)]) == 0
    out, err = capsys.readouterr()
    assert "| 3 | 0 | 1 ± 0 | 0.6 ± 0.1 (2 of 3 runs, 1 NaN/inf) |" in out
    assert "NaN/inf: values a run reported as NaN or ±inf are counted in the cell, left out of its mean." in out
    assert err == (
        f"envkit: warning: {results / 'c.json'}: loss reported as NaN or ±inf: counted in its row, "
        "left out of the mean\n"
    )


def test_a_metric_only_some_runs_report_says_how_many(tmp_path):
    results = tmp_path / "results"
    record(results, "a", device="cpu", image=None, wall=1.0, metrics={"acc": 0.5, "loss": 1}, started_at="a")
    record(results, "b", device="cpu", image=None, wall=1.0, metrics={"loss": 2}, started_at="b")
    text = render_report(build_report(load_results(results)[0]), "md")
    assert "| 0.5 (1 of 2 runs) | 1.5 ± 0.5 |" in text
    assert "k of n runs: a metric only some of the row's successful runs reported; its mean is theirs." in text


def test_a_copied_record_is_counted_once(tmp_path, capsys):
    """Before: a copy (same run name and start) was a second run."""
    results = tmp_path / "results"
    record(results, "a", device="cpu", image=None, wall=1.0)
    (results / "a-copy.json").write_text((results / "a.json").read_text())
    assert main(["report", str(results)]) == 0
    out, err = capsys.readouterr()
    assert "1 run in 1 configuration; 1 copied record (the run name and start of another) counted once." in out
    assert "| cpu on box | 1 | 0 |" in out
    assert (
        err == f"envkit: warning: {results / 'a.json'} repeats {results / 'a-copy.json'} "
        "(the same run name and start): counted once\n"
    )


def test_a_metric_name_with_a_newline_or_braces_keeps_the_table_whole(tmp_path):
    results = tmp_path / "results"
    record(results, "a", device="cpu", image=None, wall=1.0, metrics={"acc\nuracy": 0.5, "loss{x}": 1})
    text = render_report(build_report(load_results(results)[0]), "md")
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert len(table) == 3 and len({line.count(" | ") for line in table}) == 1
    assert "| acc\\nuracy | loss{x} |" in table[0]


@pytest.mark.parametrize(
    ("values", "cell"),
    [((1e200, 0.5), "| 5e+199 ± 5e+199 |"), ((1e308, 1e308, -1.5e308), "| 1.667e+307 ± 1.2e+308 |")],
    ids=["a-diverged-loss", "near-the-floats-limit"],
)
def test_huge_finite_values_average_to_what_they_are(tmp_path, capsys, values, cell):
    """Before: a run whose loss diverged to 1e200 beside one at 0.5 ended the report in an OverflowError
    traceback; runs that reported 1e308 read `inf ± inf`, though no value is infinite."""
    results = tmp_path / "results"
    for index, value in enumerate(values):
        record(results, f"r{index}", device="cpu", image=None, wall=1.0, metrics={"loss": value}, started_at=str(index))
    assert main(["report", str(results)]) == 0
    out = capsys.readouterr().out
    assert cell in out and "inf" not in out


SERIES = {"step": [0, 1, 2], "value": [2.0, 1.0, 0.5]}


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("a-metric-past-a-floats-range", "| – (2 NaN/inf) |"),
        ("a-formula-in-a-series-name", "loss$\\undefinedzz$"),
        ("a-formula-in-a-target-name", "gpu$\\frac{a}$"),
        ("a-series-near-the-floats-limit", "| loss | 1 |"),
        ("a-skipped-file-named-in-undecodable-bytes", "| cpu on box |"),
    ],
)
def test_what_a_run_can_write_never_ends_the_report_in_a_traceback(tmp_path, capsys, case, said):
    """Before: an OverflowError (an integer metric of 1 followed by 400 zeros), matplotlib's mathtext raising on
    a `$...$` name in --html and --plot, `arange: cannot compute length` for a series value of 1.7e308 in --html
    and --plot, and a UnicodeEncodeError writing the page for a skipped file named bad-\\xff.json."""
    results = tmp_path / "results"
    series, metrics, extra = {"loss": SERIES}, {"acc": 0.5}, {}
    if case == "a-metric-past-a-floats-range":
        metrics = {"acc": 10**400, "loss": 0.5}
    elif case == "a-formula-in-a-series-name":
        series = {"loss$\\undefinedzz$": SERIES}
    elif case == "a-formula-in-a-target-name":
        extra = {"target": "gpu$\\frac{a}$"}
    elif case == "a-series-near-the-floats-limit":
        series = {"loss": {"step": [0, 1, 2], "value": [2.0, 1.7e308, 0.5]}}
    # Two runs, but one where a mean would pass a float's range (two values of 1.7e308 average to inf).
    for name in ("a",) if case == "a-series-near-the-floats-limit" else ("a", "b"):
        record(
            results, name, device="cpu", image=None, wall=1.0, metrics=metrics, series=series, started_at=name, **extra
        )
    if case == "a-skipped-file-named-in-undecodable-bytes":
        with open(os.path.join(os.fsencode(results), b"bad-\xff.json"), "w") as skipped:
            skipped.write('{"schema_version": 99}')
    page, plot = tmp_path / "page.html", tmp_path / "plot.png"
    assert main(["report", str(results), "--html", str(page), "--plot", str(plot)]) == 0
    assert said in capsys.readouterr().out
    assert plot.stat().st_size > 0 and "</html>" in page.read_text()


def test_csv_and_json_keep_a_small_metric_rather_than_zero(tmp_path, capsys):
    """Before: a learning rate of 3e-7 and a loss of 1.234567e-5 read 0.0 and 1.2e-05 in csv and json, which
    round to 6 decimal places; now each keeps at least 4 significant digits, and larger values are as before."""
    results = tmp_path / "results"
    metrics = {"lr": 3e-7, "loss": 1.234567e-5, "acc": 0.123456789}
    record(results, "a", device="cpu", image=None, wall=1.0, metrics=metrics)
    assert main(["report", str(results), "--format", "csv"]) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert (row["metrics.lr_mean"], row["metrics.loss_mean"], row["metrics.acc_mean"]) == (
        "3e-07",
        "1.235e-05",
        "0.123457",
    )
    assert main(["report", str(results), "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert (row["metrics.lr_mean"], row["metrics.loss_mean"]) == (3e-7, 1.235e-5)


def test_what_the_run_wrapper_warns_is_said_under_the_table(tmp_path):
    """Issue 32 §4: a lock that differs from what ran is a warning in the record, and in the report."""
    results = tmp_path / "results"
    document = record(results, "a", device="cpu", image=None, wall=1.0)
    document["run"]["warnings"] = ["torch 2.13.0 ran, the lock has 2.9.0"]
    (results / "a.json").write_text(json.dumps(document))
    text = render_report(build_report(load_results(results)[0]), "md")
    assert "cpu on box: the run wrapper warns: torch 2.13.0 ran, the lock has 2.9.0" in text


def test_a_run_whose_program_reported_no_device_keeps_its_label_unchecked(tmp_path):
    results = tmp_path / "results"
    unseen = {"observed": False, "accelerator": None, "label": "cuda"}
    record(results, "a", device="cuda", image=None, wall=3.0, target="cuda", used=unseen)
    ((row,),) = [section.rows for section in _sections(results)]
    # Nothing says what it measured: not the baseline, no speed-up (before: 1.00×), and the note says why.
    assert row.device == "a device (not checked)" and not row.cpu_stand_in and row.speedup is None


def test_a_commands_gpu_row_beyond_its_gpus_against_a_gpu_baseline_is_flagged(tmp_path):
    """A speed-up beyond the devices used is not a result (tests/runs/test_speedup_bounds.py: a recipe's)."""
    results = tmp_path / "results"
    one, two = ({"observed": True, "accelerator": "cuda", "name": "H100", "count": n, "label": "cuda"} for n in (1, 2))
    record(results, "a", device="cuda", image=None, wall=30.0, target="cuda", used=one)
    record(results, "b", device="cuda", image=None, wall=10.0, target="cuda-2", used=two)
    record(results, "c", device="cpu", image=None, wall=60.0, target="cpu")
    against_gpu = build_report(load_results(results)[0], baseline="cuda")
    rows = {row.label: row for row in against_gpu.sections[0].rows}
    assert rows["cuda-2"].speedup_beyond == "beyond 2 GPUs: not a result"
    assert rows["cpu"].speedup_beyond is None  # another device than the baseline's: no bound
    against_cpu = build_report(load_results(results)[0])  # a GPU against the CPU: no bound either
    assert all(row.speedup_beyond is None for row in against_cpu.sections[0].rows)


def test_a_token_in_a_runs_arguments_or_stderr_is_redacted_in_every_report(tmp_path, capsys):
    """Before: a token passed as an argument (--hf-token), or printed by a failed run into its stderr, was shown in
    the markdown, csv and json reports and on the HTML page, which is committed and sent."""
    token = "ghp" + "_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"  # put together: this file holds none
    results = tmp_path / "results"
    argv = ("python", "train.py", "--token", token)
    record(results, "a", device="cpu", image=None, wall=1.0, argv=argv, started_at="a")
    record(results, "b", device="cpu", image=None, wall=1.0, argv=argv, started_at="b", status=1)
    failed = json.loads((results / "b.json").read_text())
    failed["run"]["stderr_tail"] = [f"HTTPError: 401 for token {token}"]
    (results / "b.json").write_text(json.dumps(failed))
    outputs = {}
    for output in ("md", "csv", "json"):
        assert main(["report", str(results), "--format", output]) == 0
        outputs[output] = capsys.readouterr().out
    assert main(["report", str(results), "--html", str(tmp_path / "page.html")]) == 0
    outputs["html"] = (tmp_path / "page.html").read_text()
    assert not [output for output, text in outputs.items() if token in text]
    # the title's arguments in markdown; on the page those and the failed run's stderr line, and each run's argv in
    # the records the page carries for envkit reproduce (envkit.runs.page_records)
    assert outputs["md"].count("[GitHub Token, redacted]") == 1
    assert outputs["html"].count("[GitHub Token, redacted]") == 4


def test_a_huge_field_is_cut_in_every_report_and_warning_and_keeps_its_runs_apart(tmp_path, capsys):
    """Before: three records whose argument was a 15 MB string gave a 45 MB page and a 15 MB markdown title, and a
    skipped record whose `run` was one echoed it whole in its warning (45 MB of stderr for three)."""
    results = tmp_path / "results"
    huge = "x" * 2_000_000
    for name, tail in (("a", "1"), ("b", "1"), ("c", "2")):  # a and c share the first 2 MB: two comparisons
        record(results, name, device="cpu", image=None, wall=1.0, argv=("python", huge + tail), started_at=name)
    skipped = record(results, "skipped", device="cpu", image=None, wall=1.0)
    (results / "skipped.json").write_text(json.dumps(dict(skipped, run="y" * 2_000_000)))
    page = tmp_path / "page.html"
    assert main(["report", str(results), "--html", str(page)]) == 0
    out, err = capsys.readouterr()
    assert len(out) < 20_000 and len(err) < 2_000 and page.stat().st_size < 200_000
    assert "… [cut: 2,000,001 characters, sha256 " in out
    assert "skipped.json: run: 'yyy" in err and "… [cut: 2,000,000 characters, sha256 " in err
    assert "3 runs in 2 configurations; 1 file skipped" in out


def test_a_table_shows_the_metrics_most_runs_reported_and_says_how_many_it_left_out(tmp_path, capsys):
    """Before: runs naming their metrics apart (a metric per step, per run) made a column of each in the markdown
    and on the page: 5,000 runs of 20 such names gave a 10.9 MB page and 6.3 MB of markdown."""
    results = tmp_path / "results"
    for index in range(30):
        metrics = {"loss": 0.5, **{f"m{index}_{j}": 1.0 for j in range(3)}}
        record(results, f"r{index}", device="cpu", image=None, wall=1.0, metrics=metrics, started_at=str(index))
    page = tmp_path / "page.html"
    assert main(["report", str(results), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("| where"))
    assert header.count(" | m") == 15 and "| loss |" in header  # loss, reported by every run, and 15 more
    said = "75 more metrics left out of this table: it shows the 16 the most runs reported"
    assert said in out and said in page.read_text()
    assert main(["report", str(results), "--format", "csv"]) == 0
    columns = capsys.readouterr().out.splitlines()[0].split(",")
    assert sum(1 for column in columns if column.startswith("metrics.") and column.endswith("_mean")) == 91


def test_a_speedup_measured_on_a_busy_host_is_flagged_in_the_table_and_on_the_page(tmp_path, capsys):
    """Issue 40 §5: on a host with load 9 on 2 cores, `cpu` (2 threads) took 34.9 s and `cpu-1t` 19.5 s, and the
    report and the page read "1.79× faster" with nothing recorded or shown to explain it."""
    results = tmp_path / "results"
    for name, target, wall, threads in (("a", "cpu", 34.9, 2), ("b", "cpu-1t", 19.5, 1)):
        document = record(results, name, device="cpu", image=None, wall=wall, target=target, started_at=name)
        conditions = {
            "thread_variables": {"OMP_NUM_THREADS": str(threads)},
            "torch_threads": [threads],
            "cpus": 2,
            "cpu_quota": None,
            "usable_cpus": 2,
            "cpu_share": 0.4,
        }
        document["run"].update(target=target, conditions=conditions, load_average=[9.1, 8.7])
        (results / f"{name}.json").write_text(json.dumps(document))
    page = tmp_path / "page.html"
    assert main(["report", str(results), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    busy = "host busy: load 9.1 on 2 CPUs; this speed-up is not a result"
    (row,) = [line for line in out.splitlines() if line.startswith("| cpu-1t")]
    assert f"1.79× ({busy})" in row and "faster" not in row
    assert busy in page.read_text()


def test_a_nan_or_inf_inside_a_series_is_counted_and_said_never_averaged(tmp_path, capsys):
    """Before: a series holding NaN or inf read `nan ± nan` with no word in the series table and the page."""
    results = tmp_path / "results"
    for name, values in (("a", [2.0, 1.0, 0.5]), ("b", [2.0, float("nan"), float("inf")])):
        series = {"loss": {"step": [0, 1, 2], "value": values}}
        record(results, name, device="cpu", image=None, wall=1.0, series=series, started_at=name)
    page = tmp_path / "page.html"
    assert main(["report", str(results), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("| cpu on box | loss |")]
    assert "| 0.5 (2 NaN/inf logged, left out) |" in row and "nan" not in row
    assert "(2 NaN/inf logged: gaps in the line)" in page.read_text() and "nan ±" not in page.read_text()


def test_a_table_shows_fifty_rows_and_says_how_many_it_left_out(tmp_path, capsys):
    """Before: a results folder of runs on 60 targets made a table of 60 rows in the markdown and on the page, with
    no bound (a folder of thousands of targets or locks, thousands of rows)."""
    results = tmp_path / "results"
    for index in range(60):
        record(
            results, f"r{index:02d}", device="cpu", image=None, wall=1.0, target=f"t{index:02d}", started_at=str(index)
        )
    page = tmp_path / "page.html"
    assert main(["report", str(results), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert sum(1 for line in out.splitlines() if line.startswith("| t")) == 50
    said = "10 more rows left out of this table: it shows the first 50 and each one"  # the page escapes the '
    assert said in out and said in page.read_text()
    assert main(["report", str(results), "--format", "csv"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 61  # csv lists every row

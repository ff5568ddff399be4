"""The report for any command: the run wrapper's records, grouped by experiment and place (issue 25 §7)."""

from __future__ import annotations

import json
from pathlib import Path

from envkit.cli import main
from envkit.runs.commands import command_markdown, load_command_runs
from envkit.runs.results import load_results


def record(directory: Path, name: str, *, device: str, image: str | None, wall: float, status: int = 0, metrics=None):
    """A results file as envkit_run.py writes it for a command that keeps no record of its own."""
    directory.mkdir(exist_ok=True)
    document = {
        "schema_version": 3,
        "run_name": name,
        "run": {
            "record_version": 1,
            "experiment": "train",
            "argv": ["python", "train.py"],
            "exit_status": status,
            "started_at": "2026-11-25T22:00:00+00:00",
            "wall_time_s": wall,
        },
        "metrics": metrics,
        "series": {},
        "environment": {
            "host": "box",
            "device_type": device,
            "device_name": "a device",
            "python": "3.11.7",
            "torch": "2.13.0",
            "torch_xla": None,
            "torch_tpu": None,
            "image": image,
            "image_id": None,
            "image_digest": None,
            "lock_sha256": "ab" * 32,
            "git_revision": "0123456789abcdef",
            "git_dirty": True,
            "distributions": [],
        },
    }
    (directory / f"{name}.json").write_text(json.dumps(document))


def test_runs_of_one_experiment_are_compared_across_places(tmp_path):
    """Before: `envkit report` refused every such file ('recipe' is a required property) and showed nothing."""
    record(
        tmp_path, "a", device="cpu", image="envkit-cpu:latest", wall=10.0, metrics={"acc": 0.5, "train": {"loss": 2}}
    )
    record(
        tmp_path, "b", device="cpu", image="envkit-cpu:latest", wall=12.0, metrics={"acc": 0.7, "train": {"loss": 1}}
    )
    record(tmp_path, "c", device="cuda", image="envkit-cuda:latest", wall=2.75, metrics={"acc": 0.9})
    record(tmp_path, "d", device="cuda", image="envkit-cuda:latest", wall=99.0, status=1)
    runs, warnings = load_command_runs(tmp_path)
    assert warnings == [] and len(runs) == 4
    lines = command_markdown(runs).splitlines()
    assert lines[0] == "## Experiment train"
    assert lines[2] == "4 run(s) in 2 place(s); speed-up: wall time against cpu on envkit-cpu:latest."
    assert lines[4] == "| where | runs | failed | wall time (s) | speed-up | acc | train.loss | environment |"
    environment = "Python 3.11.7, torch 2.13.0, a device, lock abababababab, git 0123456789ab (dirty)"
    assert lines[6:8] == [
        f"| cpu on envkit-cpu:latest | 2 | 0 | 11 ± 1 | 1.00× | 0.6 ± 0.1 | 1.5 ± 0.5 | {environment} |",
        f"| cuda on envkit-cuda:latest | 2 | 1 | 2.75 ± 0 | 4.00× | 0.9 ± 0 | – | {environment} |",
    ]
    assert "against cuda on envkit-cuda:latest" in command_markdown(runs, "cuda on envkit-cuda:latest")
    # the recipes' reader leaves them to this one, without a warning
    assert load_results(tmp_path) == ([], [])


def test_a_record_whose_metrics_are_not_an_object_is_skipped_with_one_line(tmp_path):
    record(tmp_path, "bad", device="cpu", image=None, wall=1.0, metrics=[1, 2])
    runs, warnings = load_command_runs(tmp_path)
    assert runs == [] and warnings == [
        f"skipped {tmp_path / 'bad.json'}: metrics: the program's metrics must be an object of name: value, got list"
    ]


def test_the_report_command_shows_them_as_markdown(tmp_path, capsys):
    record(tmp_path, "a", device="cpu", image=None, wall=1.0, metrics={"acc": 1})
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## Experiment train\n") and "| cpu on box | 1 | 0 | 1 ± 0 | 1.00× | 1 ± 0 |" in out
    assert main(["report", str(tmp_path), "--format", "csv"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "runs of commands only" in err

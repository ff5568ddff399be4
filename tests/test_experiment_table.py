"""The experiments table (envkit/data/experiments.yaml) against everything that names an experiment.

The Makefile, `make help`, the README table, doctor, the plans and `envkit experiment`
either read the table or are checked here against it, both ways.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from envkit.cli import main
from envkit.errors import EnvkitError
from envkit.project.config import load_config
from envkit.project.experiments import load_experiments
from envkit.runs.plans import IMAGE_TITLES, LOCAL_TITLES, experiment_target
from envkit.project.kinds import load_kinds

TABLE = load_experiments()
# One experiment target: `name: docker/<target>/Dockerfile docker/<target>/run.sh | $(ENVKIT) ## summary`
# and the one-line recipe `$(call experiment,$(<RECIPE>_FLAGS))`.
MAKE_EXPERIMENT = re.compile(
    r"^([a-z0-9-]+): docker/([a-z0-9-]+)/Dockerfile docker/\2/run\.sh \| \$\(ENVKIT\) ## (.+)\n"
    r"\t\$\(call experiment,\$\(([A-Z]+)_FLAGS\)\)$", re.MULTILINE)
EXAMPLE_GPUS = {"none": "", "first": " GPUS=0", "all": " GPUS=0,1,2,3"}


def test_makefile_has_one_target_per_experiment_and_no_other(repo_root):
    makefile = (repo_root / "Makefile").read_text()
    found = MAKE_EXPERIMENT.findall(makefile)
    assert makefile.count("$(call experiment,") == len(found), "an experiment target the table check cannot read"
    assert [name for name, *_ in found] == list(TABLE), "the Makefile lists the table's experiments, in its order"
    config = load_config(repo_root / "envkit.yaml")
    for name, target, summary, flags in found:
        entry = TABLE[name]
        assert target == experiment_target(config, entry, None).name, name
        assert (summary, flags) == (entry.summary, entry.recipe.upper()), name
        assert re.search(rf"^\.PHONY:[^\n]*(\\\n[^\n]*)*\b{name}\b", makefile, re.MULTILINE), f"{name} is not .PHONY"


@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
def test_make_help_shows_each_experiment_with_its_summary(repo_root):
    done = subprocess.run(["make", "--no-print-directory", "-s", "-C", str(repo_root), "help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    described = {line.split()[0]: line.split(None, 1)[1] for line in done.stdout.splitlines() if line.startswith("  ")}
    for name, entry in TABLE.items():
        assert described.get(name) == entry.summary, name
    assert "NNODES NODE_RANK RDZV_ENDPOINT RDZV_ID NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME" in done.stdout


def test_readme_table_is_the_experiments_table(repo_root):
    readme = (repo_root / "README.md").read_text()
    section = readme.split("## The experiments", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `make ")]
    expected = [f"| `make {name}{EXAMPLE_GPUS[entry.gpus]}` | {entry.summary} | {entry.published or '–'} |"
                for name, entry in TABLE.items()]
    assert [row for row in rows if not row.startswith("| `make compare`")] == expected


def test_every_experiment_runs_on_its_kinds_device():
    kinds = load_kinds()
    for entry in TABLE.values():
        assert entry.kind in kinds, entry.name
        flag = kinds[entry.kind].device_flag
        assert entry.args[:len(flag)] == flag, f"{entry.name} does not start with {flag}"


def test_plan_titles_name_experiments_of_the_table():
    assert set(LOCAL_TITLES) <= set(TABLE) and set(IMAGE_TITLES) <= set(TABLE)


@pytest.mark.parametrize("name", list(TABLE))
def test_experiment_dry_run_checks_builds_and_runs(repo_root, monkeypatch, capsys, name):
    monkeypatch.chdir(repo_root)
    entry = TABLE[name]
    assert main(["experiment", "--dry-run", "--results-dir", "/r", name, "--epochs", "1"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    assert lines[0].endswith(f" -m envkit doctor --require {entry.kind}" + (" --gpus 0" if entry.gpus == "first" else ""))
    assert " -m envkit build " in lines[1]
    # one recipe run per run of the experiment, each with the experiment's arguments, then its own
    assert len(lines) == 2 + len(entry.runs)
    for line, run in zip(lines[2:], entry.runs):
        assert line.startswith("RESULTS_DIR=/r ") and line.endswith(f"/run.sh {entry.recipe} {' '.join(run.args)} --epochs 1")
        assert run.args[:len(entry.args)] == entry.args
        if entry.named_runs:
            assert run.args[-2:] == ("--run-name", run.name)


@pytest.mark.parametrize("name", list(TABLE))
def test_experiment_with_python_runs_the_recipes_here(repo_root, monkeypatch, capsys, name):
    monkeypatch.chdir(repo_root)
    entry = TABLE[name]
    assert main(["experiment", "--dry-run", "--python", "/opt/py/bin/python", "--results-dir", "/r", name, "--epochs", "1"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    # no host check and no build: the recipe itself, with this interpreter
    assert lines == [f"/opt/py/bin/python {repo_root}/recipes/{entry.recipe}.py {' '.join(run.args)} --results-dir /r --epochs 1"
                     for run in entry.runs]


def test_several_runs_are_named_after_the_experiment_and_listed_in_the_table_order():
    named = {name: entry for name, entry in TABLE.items() if entry.named_runs}
    assert "e3-batch-scaling" in named
    for name, entry in named.items():
        assert len(entry.runs) >= 2 and all(run.name == f"{name}-{run.label}" for run in entry.runs)
    assert [run.label for run in TABLE["e3-batch-scaling"].runs] == ["b16", "b16-scaled", "b128", "b128-scaled"]
    one = TABLE["cpu-mnist"]
    assert [(run.label, run.name, run.args) for run in one.runs] == [(None, None, one.args)]


def test_two_experiments_cannot_share_a_run_name(tmp_path):
    table = tmp_path / "experiments.yaml"
    entry = ("    summary: s\n    kind: cpu\n    recipe: mnist\n    args: [--device, cpu]\n    gpus: none\n    scale: single\n"
             "    published: null\n    runs:\n")
    table.write_text("schema_version: 1\nexperiments:\n"
                     f"  e9:\n{entry}      x-y: {{summary: a, args: [--seed, '1']}}\n      z: {{summary: b, args: [--seed, '2']}}\n"
                     f"  e9-x:\n{entry}      y: {{summary: a, args: [--seed, '1']}}\n      w: {{summary: b, args: [--seed, '2']}}\n")
    with pytest.raises(EnvkitError, match=r"experiments/e9-x: run name e9-x-y is another experiment's too$"):
        load_experiments(table)


@pytest.mark.parametrize("label", ["b-16", "B16", "b16-", "2b"])
def test_a_run_label_that_could_read_as_a_repeat_is_refused(tmp_path, label):
    # write_results marks a repeated run with -2, -3, ...: no label may end like that
    table = tmp_path / "experiments.yaml"
    table.write_text("schema_version: 1\nexperiments:\n  e9:\n    summary: s\n    kind: cpu\n    recipe: mnist\n"
                     "    args: [--device, cpu]\n    gpus: none\n    scale: single\n    published: null\n    runs:\n"
                     f"      '{label}': {{summary: a, args: [--seed, '1']}}\n      z: {{summary: b, args: [--seed, '2']}}\n")
    with pytest.raises(EnvkitError, match="does not match"):
        load_experiments(table)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["experiment", "gpu-mnst"], "unknown experiment 'gpu-mnst': choose from tpu-mnist, "),
        (["experiment", "--gpus", "0,,1", "gpu-dp-cifar"], "GPUS='0,,1' is invalid"),
        (["experiment", "--target", "cpu", "gpu-dp-cifar"], "target 'cpu' is a cpu target, but gpu-dp-cifar runs in a cuda image"),
        (["experiment", "--target", "tpu", "tpu-mnist"], "unknown target 'tpu'"),
        (["experiment", "e3-batch-scaling", "--run-name", "x"],
         "e3-batch-scaling names each of its runs (e3-batch-scaling-b16, e3-batch-scaling-b16-scaled, "),
        (["experiment", "--python", "py", "e3-batch-scaling", "--run-name=x"], "and the report finds them by those names"),
        (["experiment", "--python", "py", "--gpus", "0", "--no-cache", "gpu-mnist"],
         "--python runs gpu-mnist here, without an image: leave out --gpus and build options (image runs only; "),
    ],
)
def test_experiment_bad_input_is_one_line(repo_root, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(repo_root)
    assert main([argv[0], "--dry-run", *argv[1:]]) == 2  # after NAME, --dry-run would go to the recipe
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err


def test_an_experiment_needs_a_target_of_its_kind(tmp_path, monkeypatch, capsys):
    (tmp_path / "envkit.yaml").write_text('targets:\n  a: {kind: cpu, torch: "2.9.0"}\n  b: {kind: cpu, torch: "2.8.0"}\n')
    monkeypatch.chdir(tmp_path)
    assert main(["experiment", "--dry-run", "cpu-mnist"]) == 2
    assert "has several (a, b): pick one with --target NAME" in capsys.readouterr().err
    assert main(["experiment", "--dry-run", "gpu-mnist"]) == 2
    assert "gpu-mnist runs in a cuda image, and envkit.yaml has none: add one" in capsys.readouterr().err
    assert main(["experiment", "--dry-run", "--target", "b", "cpu-mnist"]) == 0
    assert "build b" in capsys.readouterr().out


def test_experiment_stops_at_the_first_failed_step(repo_root, tmp_path):
    # No engine answers: the host check fails with its one line, and nothing is built.
    env = {"PATH": "/usr/bin:/bin", "DOCKER_HOST": f"unix://{tmp_path}/no.sock", "PYTHONPATH": str(repo_root)}
    done = subprocess.run([sys.executable, "-m", "envkit", "experiment", "cpu-mnist"], cwd=repo_root,
                          capture_output=True, text=True, env=env)
    assert done.returncode == 2
    assert "envkit: error: this host cannot run cpu images: no Docker engine answers" in done.stderr
    assert "build the cpu image" not in done.stderr

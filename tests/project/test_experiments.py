"""The experiments table (envkit.yaml's experiments) against everything that names an experiment.

The Makefile, `make help`, the README table, doctor, the plans and `envkit experiment`
either read the table or are checked here against it, both ways.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
from paths import REPO_ROOT

from envkit.cli import main
from envkit.errors import EnvkitError
from envkit.project.experiments import load_experiments, table_path
from envkit.project.kinds import load_kinds
from envkit.project.load import load_config
from envkit.project.placement import NOTEBOOK, place

TABLE = load_experiments()
# One experiment target: `name: $(RENDERED)/<target> | $(ENVKIT) ## summary` (the target's render stamp)
# and the one-line recipe `$(call experiment,$(<RECIPE>_FLAGS))`.
MAKE_EXPERIMENT = re.compile(
    r"^([a-z0-9-]+): \$\(RENDERED\)/([a-z0-9-]+) \| \$\(ENVKIT\) ## (.+)\n"
    r"\t\$\(call experiment,\$\(([A-Z]+)_FLAGS\)\)$",
    re.MULTILINE,
)
EXAMPLE_GPUS = {"none": "", "first": " GPUS=0", "all": " GPUS=0,1,2,3"}


def test_makefile_has_one_target_per_experiment_and_no_other(repo_root):
    makefile = (repo_root / "Makefile").read_text()
    found = MAKE_EXPERIMENT.findall(makefile)
    assert makefile.count("$(call experiment,") == len(found), "an experiment target the table check cannot read"
    assert [name for name, *_ in found] == list(TABLE), "the Makefile lists the table's experiments, in its order"
    config = load_config(repo_root / "envkit.yaml")
    for name, target, summary, flags in found:
        entry = TABLE[name]
        assert target == place(config, entry, None)[1].name, name
        assert (summary, flags) == (entry.summary, entry.recipe.upper()), name
        assert re.search(rf"^\.PHONY:[^\n]*(\\\n[^\n]*)*\b{name}\b", makefile, re.MULTILINE), f"{name} is not .PHONY"


@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
def test_make_help_shows_each_experiment_with_its_summary(repo_root):
    done = subprocess.run(
        ["make", "--no-print-directory", "-s", "-C", str(repo_root), "help"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    described = {line.split()[0]: line.split(None, 1)[1] for line in done.stdout.splitlines() if line.startswith("  ")}
    for name, entry in TABLE.items():
        assert described.get(name) == entry.summary, name
    assert "NNODES NODE_RANK RDZV_ENDPOINT RDZV_ID NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME" in done.stdout


def test_readme_table_is_the_experiments_table(repo_root):
    readme = (repo_root / "README.md").read_text()
    section = readme.split("## The experiments", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `make ")]
    expected = [
        f"| `make {name}{EXAMPLE_GPUS[entry.gpus]}` | {entry.summary} | {entry.published or '–'} |"
        for name, entry in TABLE.items()
    ]
    assert [row for row in rows if not row.startswith("| `make compare`")] == expected


def test_every_experiment_runs_on_its_kinds_device():
    kinds = load_kinds()
    assert TABLE, "the repository has no experiments"
    for entry in TABLE.values():
        assert entry.kind in kinds, entry.name
        flag = ("--device", kinds[entry.kind].device)
        assert entry.args[: len(flag)] == flag, f"{entry.name} does not start with {flag}"


def spelled_experiment_names(source: str) -> list[str]:
    """Experiment names written as data in Python: dict keys, tuple/list/set items, comparison operands."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        candidates = {
            ast.Dict: lambda n: n.keys,
            ast.Compare: lambda n: [n.left, *n.comparators],
            ast.Tuple: lambda n: n.elts,
            ast.List: lambda n: n.elts,
            ast.Set: lambda n: n.elts,
        }
        for kind, parts in candidates.items():
            if isinstance(node, kind):
                found += [part.value for part in parts(node) if isinstance(part, ast.Constant) and part.value in TABLE]
    return found


def test_no_experiment_name_is_spelled_in_python():
    package = REPO_ROOT / "envkit"
    spelled = {
        str(path): names
        for path in package.rglob("*.py")
        if (names := spelled_experiment_names(path.read_text(encoding="utf-8")))
    }
    assert spelled == {}


def test_the_spelled_name_check_sees_a_python_table():
    assert spelled_experiment_names('TITLES = {"cpu-mnist": "mnist"}\nif name == "gpu-mnist": pass') == [
        "cpu-mnist",
        "gpu-mnist",
    ]


def test_every_experiment_has_a_title_and_the_demo_images_have_image_titles():
    for entry in TABLE.values():
        assert entry.title.format(gpus=2, processes=2), entry.name
    assert all(entry.image_title for entry in TABLE.values() if entry.kind == "cpu")


@pytest.mark.parametrize("name", list(TABLE))
def test_experiment_dry_run_checks_builds_and_runs(repo_root, monkeypatch, capsys, name):
    monkeypatch.chdir(repo_root)
    entry = TABLE[name]
    assert main(["experiment", "--dry-run", "--results-dir", "/r", name, "--", "--epochs", "1"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    assert lines[0].endswith(
        f" -m envkit doctor --require {entry.kind}" + (" --gpus 0" if entry.gpus == "first" else "")
    )
    assert " -m envkit build " in lines[1]
    # one recipe run per run of the experiment: the experiment's arguments, the run's, its defaults, the user's
    assert len(lines) == 2 + len(entry.runs)
    for line, run in zip(lines[2:], entry.runs):
        assert line.startswith("RESULTS_DIR=/r ") and line.endswith(
            f"/run.sh python recipes/{entry.recipe}.py {' '.join(run.argv)} --epochs 1"
        )
        assert run.args[: len(entry.args)] == entry.args and run.argv == (*run.args, *entry.defaults)
        if entry.named_runs:
            assert run.args[-2:] == ("--run-name", run.name)


@pytest.mark.parametrize("name", list(TABLE))
def test_experiment_with_python_runs_the_recipes_here(repo_root, monkeypatch, capsys, name):
    monkeypatch.chdir(repo_root)
    entry = TABLE[name]
    assert (
        main(
            [
                "experiment",
                "--dry-run",
                "--python",
                "/opt/py/bin/python",
                "--results-dir",
                "/r",
                name,
                "--",
                "--epochs",
                "1",
            ]
        )
        == 0
    )
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    # no host check and no build: the recipe itself, with this interpreter, from the project's root through the run
    # wrapper (as run.sh runs it in an image: a run that fails before the recipe writes still gets its record),
    # naming the target it runs as, its kind's target here, so its record's row is an image run's
    device = load_kinds()[entry.kind].device
    wrapper = repo_root / "envkit" / "support" / "provenance.py"
    target = place(load_config(repo_root / "envkit.yaml"), entry, None)[1].name
    assert lines == [
        f"cd {repo_root} && ENVKIT_RESULTS_DIR=/r ENVKIT_DEVICE={device} ENVKIT_EXPERIMENT={name} "
        f"ENVKIT_TARGET={target} /opt/py/bin/python "
        f"{wrapper} /opt/py/bin/python recipes/{entry.recipe}.py {' '.join(run.argv)} --epochs 1"
        for run in entry.runs
    ]


def test_a_run_here_names_no_target_where_none_is_its_default(tmp_path, monkeypatch, capsys):
    # an image run refuses to guess between two cpu targets; a run on this host needs no image, so it runs as its kind
    (tmp_path / "envkit.yaml").write_text(
        'targets:\n  a: {kind: cpu, torch: "2.9.0"}\n  b: {kind: cpu, torch: "2.9.0"}\n'
        "experiments:\n  t: {summary: s, command: [python, t.py], kind: cpu}\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["experiment", "--dry-run", "t", "--python", "/usr/bin/python3"]) == 0
    out = capsys.readouterr().out
    assert "ENVKIT_EXPERIMENT=t /usr/bin/python3 " in out and "ENVKIT_TARGET" not in out
    assert main(["experiment", "--dry-run", "t", "--python", "/usr/bin/python3", "--target", "b"]) == 0
    assert "ENVKIT_EXPERIMENT=t ENVKIT_TARGET=b /usr/bin/python3 " in capsys.readouterr().out


def test_several_runs_are_named_after_the_experiment_and_listed_in_the_table_order():
    named = {name: entry for name, entry in TABLE.items() if entry.named_runs}
    assert "e3-batch-scaling" in named
    for name, entry in named.items():
        assert len(entry.runs) >= 2 and all(run.name == f"{name}-{run.label}" for run in entry.runs)
    assert [run.label for run in TABLE["e3-batch-scaling"].runs] == ["b16", "b16-scaled", "b128", "b128-scaled"]
    one = TABLE["cpu-mnist"]
    assert [(run.label, run.name, run.argv) for run in one.runs] == [(None, None, one.args)]


def test_two_experiments_cannot_share_a_run_name(tmp_path):
    table = tmp_path / "experiments.yaml"
    entry = (
        "    summary: s\n    title: t\n    kind: cpu\n    recipe: mnist\n    args: [--device, cpu]\n    gpus: none\n    scale: single\n"
        "    published: null\n    runs:\n"
    )
    table.write_text(
        "schema_version: 1\nexperiments:\n"
        f"  e9:\n{entry}      x-y: {{summary: a, args: [--seed, '1']}}\n      z: {{summary: b, args: [--seed, '2']}}\n"
        f"  e9-x:\n{entry}      y: {{summary: a, args: [--seed, '1']}}\n      w: {{summary: b, args: [--seed, '2']}}\n"
    )
    with pytest.raises(EnvkitError, match=r"experiments/e9-x: run name e9-x-y is another experiment's too$"):
        load_experiments(table)


@pytest.mark.parametrize("label", ["b-16", "B16", "b16-", "2b"])
def test_a_run_label_that_could_read_as_a_repeat_is_refused(tmp_path, label):
    # write_results marks a repeated run with -2, -3, ...: no label may end like that
    table = tmp_path / "experiments.yaml"
    table.write_text(
        "schema_version: 1\nexperiments:\n  e9:\n    summary: s\n    title: t\n    kind: cpu\n    recipe: mnist\n"
        "    args: [--device, cpu]\n    gpus: none\n    scale: single\n    published: null\n    runs:\n"
        f"      '{label}': {{summary: a, args: [--seed, '1']}}\n      z: {{summary: b, args: [--seed, '2']}}\n"
    )
    with pytest.raises(EnvkitError, match="does not match"):
        load_experiments(table)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["experiment", "gpu-mnst"], "unknown experiment 'gpu-mnst': choose from tpu-mnist, "),
        (["experiment", "--gpus", "0,,1", "gpu-dp-cifar"], "GPUS='0,,1' is invalid"),
        (
            ["experiment", "--target", "cpu", "gpu-dp-cifar"],
            "target 'cpu' is a cpu target, but gpu-dp-cifar runs in a cuda image",
        ),
        (["experiment", "--target", "tpu", "tpu-mnist"], "unknown target 'tpu'"),
        # what makes E3's runs E3 (batch, learning-rate rule, run name) is the table's; its size is not
        (
            ["experiment", "e3-batch-scaling", "--", "--run-name", "x"],
            "e3-batch-scaling runs with --run-name e3-batch-scaling-b16 (envkit.yaml), and the recipe "
            "arguments say --run-name x: drop it",
        ),
        (
            ["experiment", "--python", "py", "e3-batch-scaling", "--", "--warmup-epochs=5"],
            "e3-batch-scaling runs with --warmup-epochs 0 ",
        ),
        (
            ["experiment", "--python", "py", "e3-batch-scaling", "--", "--per-device-batch", "32"],
            "e3-batch-scaling runs with --per-device-batch 16 ",
        ),
        (
            ["experiment", "--python", "py", "--gpus", "0", "--no-cache", "gpu-mnist"],
            "--python runs gpu-mnist here, without an image: leave out --gpus and build options (image runs only; ",
        ),
        # Before: the password went on the command line of the `envkit build` it runs, and into its dry run
        (
            ["experiment", "cpu-mnist", "--build-arg", "PIP_INDEX_URL=https://ci:Xk7pQ2vR9@pkgs.example.org/s"],
            "--build-arg PIP_INDEX_URL holds a password in a URL, which the `envkit build` this command runs and "
            "prints would carry on its command line: set ENVKIT_PIP_INDEX_URL to that URL instead",
        ),
    ],
)
def test_experiment_bad_input_is_one_line(repo_root, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(repo_root)
    assert main([*argv, "--dry-run"]) == 2  # after NAME, --dry-run is still envkit's
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err


@pytest.mark.parametrize(
    "argv",
    [
        ["experiment", "cpu-mnist", "--dry-run"],
        ["experiment", "--dry-run", "cpu-mnist"],
        ["experiment", "cpu-mnist", "--dry-run", "--", "--epochs", "1"],
    ],
)
def test_dry_run_anywhere_before_dashes_is_a_dry_run(repo_root, tmp_path, argv):
    """Before: options after NAME went to the recipe, so this ran doctor and a real docker build."""
    env = {"PATH": "/usr/bin:/bin", "DOCKER_HOST": f"unix://{tmp_path}/no.sock", "PYTHONPATH": str(repo_root)}
    done = subprocess.run(
        [sys.executable, "-m", "envkit", *argv], cwd=repo_root, capture_output=True, text=True, env=env
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[
        -1
    ] == "ENVKIT_EXPERIMENT=cpu-mnist docker/cpu/run.sh python recipes/mnist.py --device cpu" + (
        " --epochs 1" if "--" in argv else ""
    )


def test_recipe_arguments_without_dashes_are_one_line_naming_the_rule(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["experiment", "cpu-mnist", "--epochs", "1", "--gpus", "x"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "envkit: error: unrecognized arguments: --epochs 1; recipe arguments follow '--': "
        "envkit experiment cpu-mnist --gpus x -- --epochs 1 (see 'envkit --help')\n"
    )
    with pytest.raises(SystemExit):
        main(["render", "--all", "--", "--epochs", "1"])
    assert "'--' passes arguments to a recipe, and render runs none" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["experiment", "--gpus", "0", "cpu-mnist"],
            "--gpus 0: cpu-mnist runs without GPUs (cpu experiments take none); drop --gpus (GPUS= for make)",
        ),
        (["experiment", "--gpus", "all", "tpu-mnist"], "tpu-mnist runs without GPUs (tpu-vm experiments take none)"),
        (
            ["experiment", "cpu-ddp-cifar", "--", "--parallel", "none", "--device", "cuda"],
            "cpu-ddp-cifar runs with --parallel ddp (envkit.yaml), and the recipe arguments say --parallel none: "
            "drop it; cpu-single-cifar runs with --device cpu --parallel none",
        ),
        (
            ["experiment", "cpu-ddp-cifar", "--", "--device=cuda"],
            "cpu-ddp-cifar runs with --device cpu (envkit.yaml), and the recipe arguments say --device cuda: "
            "drop it; gpu-ddp-cifar runs with --device cuda --parallel ddp",
        ),
        (["experiment", "tpu-mnist", "--", "--cor", "1"], "tpu-mnist runs with --cores all"),
    ],
)
def test_an_experiment_keeps_its_own_settings(repo_root, monkeypatch, capsys, argv, message):
    """Before: --gpus was ignored and the recipe's last --parallel won, silently running another experiment."""
    monkeypatch.chdir(repo_root)
    assert main([*argv, "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("envkit: error: ") and err.count("\n") == 1 and message in err


def test_recipe_arguments_that_agree_with_the_experiment_pass(repo_root, monkeypatch, capsys):
    monkeypatch.chdir(repo_root)
    assert main(["experiment", "cpu-ddp-cifar", "--dry-run", "--", "--parallel", "ddp", "--epochs", "1"]) == 0
    assert capsys.readouterr().out.endswith(
        "run.sh python recipes/cifar.py --device cpu --parallel ddp --parallel ddp --epochs 1\n"
    )


def test_an_experiment_needs_a_target_of_its_kind(tmp_path, monkeypatch, capsys):
    (tmp_path / "envkit.yaml").write_text(
        'targets:\n  a: {kind: cpu, torch: "2.9.0"}\n  b: {kind: cpu, torch: "2.8.0"}\nexperiments:\n'
        "  cpu-mnist: {summary: s, kind: cpu, recipe: mnist}\n  gpu-mnist: {summary: s, kind: cuda, recipe: mnist}\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["experiment", "--dry-run", "cpu-mnist"]) == 2
    assert "has several (a, b): pick one with --target NAME" in capsys.readouterr().err
    assert main(["experiment", "--dry-run", "gpu-mnist"]) == 2
    assert "gpu-mnist runs in a cuda image, and envkit.yaml has none: add one" in capsys.readouterr().err
    assert main(["experiment", "--dry-run", "--target", "b", "cpu-mnist"]) == 0
    assert "build b" in capsys.readouterr().out


MANY = (
    'targets:\n  cpu: {kind: cpu, torch: "2.9.0"}\n  gpu: {kind: cuda, torch: "2.9.0", cuda: "12.8"}\n'
    '  t4: {platform: colab, accelerator: T4, torch: "2.9.0"}\n'
    "experiments:\n  train: {summary: s, command: [python, train.py], targets: [gpu, cpu, t4], gpus: first}\n"
)


def test_one_experiment_runs_on_each_of_its_targets(tmp_path, monkeypatch, capsys):
    """Issue 32 §1: one experiment, many targets; before, one experiment per kind (cpu-train, gpu-train, ...)."""
    (tmp_path / "envkit.yaml").write_text(MANY)
    monkeypatch.chdir(tmp_path)
    config = load_config(tmp_path / "envkit.yaml")
    entry = load_experiments(tmp_path / "envkit.yaml")["train"]
    assert entry.targets == ("gpu", "cpu", "t4")
    # the first image target by default; a chosen one gives its kind and the GPU rule on it
    placed = {name: place(config, entry, name) for name in (None, "cpu")}
    assert [(e.kind, e.target, e.gpus, t.name) for e, t in placed.values()] == [
        ("cuda", "gpu", "first", "gpu"),
        ("cpu", "cpu", "none", "cpu"),
    ]
    notebook, target = place(config, entry, None, NOTEBOOK)
    assert (notebook.kind, target.name) == ("cuda", "t4")
    assert main(["experiment", "--dry-run", "train", "--target", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "envkit doctor --require cpu\n" in out and "build cpu" in out and "docker/cpu/run.sh python train.py" in out
    assert main(["experiment", "--dry-run", "train"]) == 0
    assert "envkit doctor --require cuda --gpus 0\n" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "cpu", "--target", "gpu"], "--target given twice (cpu, gpu): give one"),
        (["--target", "t4"], "target 't4' is a notebook target (colab), not an image: envkit notebook train"),
        (["--target", "tpu"], "unknown target 'tpu'; targets in envkit.yaml: cpu, gpu, t4"),
    ],
)
def test_a_target_the_experiment_cannot_take_is_one_line(tmp_path, monkeypatch, capsys, argv, message):
    (tmp_path / "envkit.yaml").write_text(MANY)
    monkeypatch.chdir(tmp_path)
    assert main(["experiment", "--dry-run", "train", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err


def test_a_target_outside_the_experiments_list_is_refused(tmp_path, monkeypatch, capsys):
    (tmp_path / "envkit.yaml").write_text(MANY.replace("[gpu, cpu, t4]", "[gpu, t4]"))
    monkeypatch.chdir(tmp_path)
    assert main(["experiment", "--dry-run", "train", "--target", "cpu"]) == 2
    assert capsys.readouterr().err == (
        "envkit: error: train runs on gpu, t4, not cpu: add cpu to its targets in envkit.yaml\n"
    )
    assert main(["notebook", "train", "--target", "cpu"]) == 2
    assert "target 'cpu' is not a notebook target (it names no platform); notebook targets in envkit.yaml: t4" in (
        capsys.readouterr().err
    )


def test_experiment_stops_at_the_first_failed_step(repo_root, tmp_path):
    # No engine answers: the host check fails with its one line, and nothing is built.
    env = {"PATH": "/usr/bin:/bin", "DOCKER_HOST": f"unix://{tmp_path}/no.sock", "PYTHONPATH": str(repo_root)}
    done = subprocess.run(
        [sys.executable, "-m", "envkit", "experiment", "cpu-mnist"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 2
    assert "envkit: error: this host cannot run cpu images: no Docker engine answers" in done.stderr
    assert "build the cpu image" not in done.stderr


# ------------------------------------------------------------------ a project's own experiments (issue 25 §3)
TARGETS = 'targets:\n  cpu: {kind: cpu, torch: "2.9.0"}\n  gpu: {kind: cuda, torch: "2.9.0", cuda: "12.8"}\n'


def project_config(tmp_path, experiments: str, targets: str = TARGETS):
    config = tmp_path / "envkit.yaml"
    config.write_text(targets + experiments)
    return config


def test_a_command_experiment_in_the_config_with_its_defaults(tmp_path):
    config = project_config(
        tmp_path,
        "experiments:\n"
        "  cpu-train:\n    summary: train.py on the CPU\n    kind: cpu\n    command: [python, train.py, --epochs, '3']\n"
        "    env: {WANDB_MODE: offline}\n"
        "  gpu-train:\n    summary: train.py on the GPUs\n    target: gpu\n    command: [python, train.py]\n",
    )
    table = load_experiments(config)
    cpu, gpu = table["cpu-train"], table["gpu-train"]
    assert cpu.command == ("python", "train.py", "--epochs", "3") and cpu.recipe is None
    assert (cpu.title, cpu.kind, cpu.gpus, cpu.scale, cpu.published, cpu.env) == (
        "train.py on the CPU",
        "cpu",
        "none",
        "single",
        None,
        {"WANDB_MODE": "offline"},
    )
    # the kind follows from the target it names; a GPU kind gives it every GPU of GPUS= by default
    assert (gpu.kind, gpu.target, gpu.gpus) == ("cuda", "gpu", "all")
    assert load_config(config).experiments == table


def test_experiments_in_a_file_the_config_names(tmp_path):
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "table.yaml").write_text(
        "experiments:\n  cpu-train: {summary: s, kind: cpu, command: [python, train.py]}\n"
    )
    config = project_config(tmp_path, "experiments: exp/table.yaml\n")
    assert list(load_experiments(config)) == ["cpu-train"]
    assert table_path(config) == tmp_path / "exp" / "table.yaml"


def test_a_project_without_experiments_has_an_empty_table(tmp_path, monkeypatch, capsys):
    config = project_config(tmp_path, "")
    assert load_experiments(config) == {}
    monkeypatch.chdir(tmp_path)
    assert main(["experiment", "--dry-run", "train"]) == 2
    assert capsys.readouterr().err == f"envkit: error: unknown experiment 'train': {config} has no experiments\n"


@pytest.mark.parametrize(
    ("experiments", "message"),
    [
        (
            "experiments:\n  cpu-train: {summary: s, kind: cpu, command: python train.py}\n",
            "experiments/cpu-train/command: 'python train.py' is not of type 'array'",
        ),
        (
            "experiments:\n  cpu-train: {summary: s, kind: cpu, command: [python, 3]}\n",
            "experiments/cpu-train/command/1: 3 is not of type 'string'",
        ),
        (
            "experiments:\n  render: {summary: s, kind: cpu, command: [python, train.py]}\n",
            "experiments/render: the name is a make target of envkit's; rename it (reserved: help, render,",
        ),
        (
            "experiments:\n  build-cpu: {summary: s, kind: cpu, command: [python, train.py]}\n",
            "experiments/build-cpu: the name is a make target of envkit's",
        ),
        (
            "experiments:\n  rocm-train: {summary: s, kind: rocm, command: [python, train.py]}\n",
            "experiments/rocm-train/kind: 'rocm' is not a target kind; choose from cpu, cuda, tpu-vm",
        ),
        (
            "experiments:\n  cpu-train: {summary: s, kind: cpu, recipe: mnist, command: [python, train.py]}\n",
            "experiments/cpu-train: give either command (an argv list run from the project root) or recipe, not both",
        ),
        (
            "experiments:\n  cpu-train: {summary: s, kind: cpu}\n",
            "experiments/cpu-train: give either command",
        ),
        (
            "experiments:\n  cpu-train: {summary: s, command: [python, train.py]}\n",
            "experiments/cpu-train: give targets (the config's targets it runs on) or kind (one of cpu, cuda, tpu-vm)",
        ),
        (
            "experiments:\n  cpu-train: {summary: s, target: tpu, command: [python, train.py]}\n",
            "experiments/cpu-train/target: 'tpu' is not a target of the config; choose from cpu, gpu",
        ),
        (
            "experiments:\n  train: {summary: s, targets: [cpu, tpu], command: [python, train.py]}\n",
            "experiments/train/targets/1: 'tpu' is not a target of the config; choose from cpu, gpu",
        ),
        (
            "experiments:\n  train: {summary: s, targets: [cpu, cpu], command: [python, train.py]}\n",
            "experiments/train/targets: ['cpu', 'cpu'] has non-unique elements",
        ),
        (
            "experiments:\n  train: {summary: s, targets: [cpu], target: cpu, command: [python, train.py]}\n",
            "experiments/train: give targets (a list) or target, not both",
        ),
        (
            "experiments:\n  cpu-train: {summary: s, target: gpu, kind: cpu, command: [python, train.py]}\n",
            "experiments/cpu-train/kind: 'cpu' is not the kind of target gpu (cuda); drop one",
        ),
        ("experiments: ../elsewhere.yaml\n", "experiments: '../elsewhere.yaml' is outside the project"),
        ("experiments: table.yaml\n", "experiments: table.yaml not found; name a YAML file with an experiments key"),
    ],
)
def test_a_bad_experiment_is_one_line_before_anything_renders(tmp_path, capsys, experiments, message):
    config = project_config(tmp_path, experiments)
    with pytest.raises(EnvkitError, match=re.escape(message)):
        load_experiments(config)
    assert main(["render", "--all", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and not (tmp_path / "docker").exists()


def test_an_experiments_env_reaches_its_command_on_the_host_and_in_the_image(tmp_path, monkeypatch, capsys, repo_root):
    """Issue 32 §8: before, env: was honoured in notebooks only; envkit experiment and run.sh dropped it."""
    (tmp_path / "envkit.yaml").write_text(
        MANY.replace("gpus: first}", "gpus: first, env: {WANDB_MODE: offline, NOTE: 'a b'}}")
    )
    monkeypatch.chdir(tmp_path)
    assert main(["experiment", "--dry-run", "train", "--target", "cpu"]) == 0
    # over the thread budget a command on a CPU gets (every CPU here for its one process), as on a host
    threads = len(os.sched_getaffinity(0))
    assert capsys.readouterr().out.endswith(
        f"ENVKIT_EXPERIMENT=train OMP_NUM_THREADS={threads} WANDB_MODE=offline NOTE='a b' "
        "ENVKIT_ENV='OMP_NUM_THREADS WANDB_MODE NOTE' docker/cpu/run.sh python train.py\n"
    )
    assert main(["experiment", "--dry-run", "train", "--target", "cpu", "--python", "/usr/bin/python3"]) == 0
    out = capsys.readouterr().out
    # the target it runs as reaches the run wrapper, whose record names it (the report's row)
    assert "WANDB_MODE=offline NOTE='a b' ENVKIT_DEVICE=cpu ENVKIT_EXPERIMENT=train ENVKIT_TARGET=cpu " in out
    # run.sh passes each named variable into the container
    env = {"PATH": os.environ["PATH"], "ENVKIT_DRY_RUN": "1", "ENVKIT_ENV": "WANDB_MODE NOTE", "WANDB_MODE": "offline"}
    done = subprocess.run(
        [str(repo_root / "docker" / "cpu" / "run.sh"), "python", "train.py"],
        cwd=tmp_path,
        env={**env, "NOTE": "a b"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and " -e WANDB_MODE -e NOTE " in done.stdout, done.stderr
    done = subprocess.run(
        [str(repo_root / "docker" / "cpu" / "run.sh"), "python", "train.py"],
        cwd=tmp_path,
        env={**env, "ENVKIT_ENV": "A;B"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (2, "run.sh: error: ENVKIT_ENV must be variable names; got 'A;B'\n")


# Put together here so that this file itself holds no token a scanner would flag.
HF_TOKEN = "hf" + "_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"


@pytest.mark.parametrize(
    ("entry", "path"),
    [
        (f"{{kind: cpu, summary: s, command: [python, t.py], args: [--hf-token, {HF_TOKEN}]}}", "experiments/e/args/1"),
        (f"{{kind: cpu, summary: s, recipe: mnist, defaults: ['--token={HF_TOKEN}']}}", "experiments/e/defaults/0"),
        (
            f"{{kind: cpu, summary: s, recipe: mnist, runs: {{a: {{summary: s, args: [{HF_TOKEN}]}}, b: {{summary: s, args: [--x]}}}}}}",
            "experiments/e/runs/a/args/0",
        ),
        (f"{{kind: cpu, command: [python, t.py], summary: 'with {HF_TOKEN}'}}", "experiments/e/summary"),
    ],
)
@pytest.mark.parametrize("in_file", [False, True])
def test_a_token_anywhere_in_the_experiments_is_refused_by_its_key_path_unless_listed(tmp_path, entry, path, in_file):
    """Before: a token in an experiment's args, defaults, runs.*.args or summary went into the notebook's markdown,
    its settings cell and its archive's report/experiments.json (only env: and command were checked, in the
    notebook builder): the experiments are now read by one check where they are loaded, in envkit.yaml or the file
    it names, which names the key path and never the value."""
    table = f"experiments:\n  e: {entry}\n"
    config = tmp_path / "envkit.yaml"
    head = 'targets:\n  cpu: {kind: cpu, torch: "2.9.0"}\n'
    if in_file:
        (tmp_path / "exp.yaml").write_text(table)
        config.write_text(head + "experiments: exp.yaml\n")
    else:
        config.write_text(head + table)
    with pytest.raises(EnvkitError) as caught:
        load_experiments(config)
    message, source = str(caught.value), tmp_path / ("exp.yaml" if in_file else "envkit.yaml")
    assert message.startswith(f"{source}: {path} holds a Hugging Face token"), message
    assert HF_TOKEN not in message and "\n" not in message
    config.write_text(f"include_secrets: [{source.name}]\n" + config.read_text())  # the one way in
    assert list(load_experiments(config)) == ["e"]

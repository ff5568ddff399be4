"""The Makefile as text: `make help` and `make -n` dry runs in a copy of the project.

A copy, so that file dates can be arranged (rendered files fresh or stale, the venv
present or not) without touching the checkout. An experiment target runs one
`envkit experiment` line; ``planned`` shows the steps that line runs (its --dry-run).
The copy's envkit is a stand-in that only records how it was called, so a test sees
which lines make really ran (DRY_RUN=1 runs envkit's own dry runs, nothing else).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envkit.project.experiments import load_experiments
from envkit.support.provenance_records import RESULTS_FOLDER

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")

ISSUE_TARGETS = [
    "render",
    "build-cpu",
    "build-cuda",
    "build-tpu-vm",
    "cpu-mnist",
    "gpu-mnist",
    "tpu-mnist",
    "tpu-mnist-single",
    "gpu-single-cifar",
    "gpu-dp-cifar",
    "gpu-ddp-cifar",
    "compare",
    "push",
    "save",
    "load",
    "demo",
    "test",
]
KINDS = ("cpu", "cuda", "tpu-vm")


def _age(path: Path, seconds_ago: int) -> None:
    stamp = 1_700_000_000 - seconds_ago
    os.utime(path, (stamp, stamp))


@pytest.fixture
def project(tmp_path: Path, repo_root: Path) -> Path:
    """Makefile + inputs, with renders newer than the config and the venv newest."""
    work = tmp_path / "project"
    work.mkdir()
    shutil.copy(repo_root / "Makefile", work)
    for name in (
        "envkit.yaml",
        "pyproject.toml",
        "requirements/dev.lock",
        "requirements/xla.in",
        "requirements/xla.lock",
        "requirements/sky.in",
        "requirements/sky.lock",
        "requirements/tpu.in",
        "requirements/bench.in",
        "requirements/bench.lock",
        "templates/Dockerfile.j2",
        "envkit/data/matrix.yaml",
    ):
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text("stand-in\n")
        _age(work / name, 300)
    # GPUS's syntax is read from kinds.yaml (gpu_indices), the results folder's name from the run wrapper.
    shutil.copy(repo_root / "envkit" / "data" / "kinds.yaml", work / "envkit" / "data" / "kinds.yaml")
    _age(work / "envkit" / "data" / "kinds.yaml", 300)
    (work / "envkit" / "support").mkdir()
    shutil.copy(repo_root / "envkit" / "support" / "provenance_records.py", work / "envkit" / "support")
    for kind in KINDS:
        for name in ("Dockerfile", "run.sh"):
            (work / "docker" / kind).mkdir(parents=True, exist_ok=True)
            (work / "docker" / kind / name).write_text("rendered\n")
            _age(work / "docker" / kind / name, 200)
        (work / ".cache" / "rendered").mkdir(parents=True, exist_ok=True)
        (work / ".cache" / "rendered" / kind).write_text("")
        _age(work / ".cache" / "rendered" / kind, 200)
    (work / ".venv" / "bin").mkdir(parents=True)
    envkit = work / ".venv" / "bin" / "envkit"
    envkit.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"with open({str(work / 'envkit-calls.jsonl')!r}, 'a') as calls:\n"
        "    calls.write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    envkit.chmod(0o755)
    _age(envkit, 100)
    return work


def envkit_calls(project: Path) -> list[list[str]]:
    """The argument lists the stand-in envkit was run with."""
    calls = project / "envkit-calls.jsonl"
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def tree(project: Path) -> dict[str, tuple[int, bytes]]:
    """Every file with its mtime and content (the calls log aside)."""
    return {
        p.relative_to(project).as_posix(): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(project.rglob("*"))
        if p.is_file() and p.name != "envkit-calls.jsonl"
    }


def make(project: Path, *args: str) -> subprocess.CompletedProcess:
    # A top-level make whatever runs the tests: under `make test` the inherited MAKELEVEL would
    # make it say "make[1]:", and MAKEFLAGS would pass the outer make's flags on.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(project), *args], capture_output=True, text=True, env=env
    )


def dry_run(project: Path, *args: str) -> list[str]:
    done = make(project, "-n", *args)
    assert done.returncode == 0, done.stderr
    return [" ".join(line.split()) for line in done.stdout.splitlines()]


def planned(repo_root: Path, make_line: str) -> list[str]:
    """The commands the `envkit experiment` line of ``make -n`` runs, envkit named as make names it."""
    words = shlex.split(make_line)
    start = words.index("experiment")
    done = subprocess.run(
        [sys.executable, "-m", "envkit", *words[start : start + 1], "--dry-run", *words[start + 1 :]],
        cwd=repo_root,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo_root)},
    )
    assert done.returncode == 0, done.stderr
    envkit = words[start - 1]
    return [
        line.replace(f"{sys.executable} -m envkit", envkit)
        for line in done.stdout.splitlines()
        if not line.startswith("#")
    ]


def launch(repo_root: Path, make_line: str) -> subprocess.CompletedProcess:
    """The `envkit launch ...` line of ``make -n``, run by this checkout's envkit."""
    words = shlex.split(make_line)
    return subprocess.run(
        [sys.executable, "-m", "envkit", *words[words.index("launch") :]],
        cwd=repo_root,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo_root)},
    )


def launched(repo_root: Path, make_line: str) -> str:
    """What that line prints with DRY_RUN=1: exactly what it would submit."""
    assert "--dry-run" in shlex.split(make_line), make_line
    done = launch(repo_root, make_line)
    assert done.returncode == 0, done.stderr
    return done.stdout


def experiment(project: Path, repo_root: Path, *args: str) -> list[str]:
    """``make -n`` of an experiment target: one `envkit experiment` line, expanded into its steps."""
    lines = dry_run(project, *args)
    assert len(lines) == 1 and " experiment " in lines[0], lines
    return planned(repo_root, lines[0])


def test_e3_runs_its_four_runs_in_the_image_or_with_recipe_python(project, repo_root):
    lines = experiment(project, repo_root, "e3-batch-scaling", "EPOCHS=3", "RESULTS_DIR=/r")
    assert lines[:2] == [".venv/bin/envkit doctor --require tpu-vm", ".venv/bin/envkit build tpu-vm"]
    # each run under its own name; EPOCHS= changes the experiment's size (its defaults), after them
    assert [line.split(" --run-name ")[1] for line in lines[2:]] == [
        f"e3-batch-scaling-{run} --dataset fake --fake-train-size 4096 --epochs 10 --epochs 3"
        for run in ("b16", "b16-scaled", "b128", "b128-scaled")
    ]
    # RECIPE_PYTHON: the recipes on this host with that interpreter (E3 on XLA:CPU), no host check, no build
    (make_line,) = dry_run(project, "e3-batch-scaling", "RECIPE_PYTHON=.venv-xla/bin/python", "RESULTS_DIR=/r")
    assert " --python '.venv-xla/bin/python' e3-batch-scaling" in make_line
    here = planned(repo_root, make_line)
    variables = "ENVKIT_RESULTS_DIR=/r ENVKIT_DATA_DIR=" + shlex.quote(str(project / "data")) + " ENVKIT_DEVICE=tpu"
    python, wrapper = repo_root / ".venv-xla" / "bin" / "python", repo_root / "envkit" / "support" / "provenance.py"
    # from the project's root through the run wrapper, which records each run, failed or not
    start = (
        f"cd {repo_root} && {variables} ENVKIT_EXPERIMENT=e3-batch-scaling ENVKIT_TARGET=tpu-vm {python} {wrapper} "
        f"{python} recipes/mnist.py"
    )
    assert len(here) == 4 and all(line.startswith(f"{start} --device tpu ") for line in here), here


def test_help_lists_every_target_with_one_line(project):
    done = make(project, "help")
    assert done.returncode == 0, done.stderr
    described = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("  ")}
    for target in ISSUE_TARGETS:
        assert target in described, f"make help misses {target}"
        assert len(described[target].split()) > 2, f"{target} has no description"
    assert "GPUS" in done.stdout and "REGISTRY" in done.stdout


def test_help_is_the_default_goal(project):
    assert make(project).stdout == make(project, "help").stdout


def test_cpu_mnist_checks_the_host_then_builds_then_runs(project, repo_root):
    make_lines = dry_run(project, "cpu-mnist", "DATASET=fake", "MAX_STEPS=5", "RESULTS_DIR=/r", "DATA_DIR=/d")
    assert make_lines == [
        ".venv/bin/envkit experiment --results-dir /r --data-dir /d cpu-mnist -- --dataset fake --max-steps 5"
    ]
    lines = planned(repo_root, make_lines[0])
    assert lines == [
        ".venv/bin/envkit doctor --require cpu",
        ".venv/bin/envkit build cpu",
        "RESULTS_DIR=/r DATA_DIR=/d ENVKIT_EXPERIMENT=cpu-mnist docker/cpu/run.sh python recipes/mnist.py --device cpu --dataset fake --max-steps 5",
    ]


def test_results_dir_defaults_to_the_project(project, repo_root):
    run_line = experiment(project, repo_root, "cpu-mnist")[-1]
    assert f"RESULTS_DIR={project}/results DATA_DIR={project}/data" in run_line


def test_gpu_dp_cifar_passes_gpus_model_batch_epochs(project, repo_root):
    lines = experiment(project, repo_root, "gpu-dp-cifar", "GPUS=1,2,3,4", "MODEL=resnet50", "BATCH=128", "EPOCHS=2")
    assert lines[0] == ".venv/bin/envkit doctor --require cuda --gpus 1,2,3,4"
    assert lines[1] == ".venv/bin/envkit build cuda"
    assert (
        "GPUS=1,2,3,4 ENVKIT_EXPERIMENT=gpu-dp-cifar docker/cuda/run.sh python recipes/cifar.py --device cuda --parallel dp"
        in lines[-1]
    )
    assert lines[-1].endswith("--epochs 2 --global-batch 128 --model resnet50")


def test_ddp_and_single_gpu_variants(project, repo_root):
    assert (
        "run.sh python recipes/cifar.py --device cuda --parallel ddp"
        in experiment(project, repo_root, "gpu-ddp-cifar", "GPUS=0,1")[-1]
    )
    single = experiment(project, repo_root, "gpu-single-cifar", "GPUS=2,3")
    assert single[0].endswith("--gpus 2")  # one GPU: the first of GPUS
    assert (
        "GPUS=2 ENVKIT_EXPERIMENT=gpu-single-cifar docker/cuda/run.sh python recipes/cifar.py --device cuda --parallel none"
        in single[-1]
    )
    assert (
        "GPUS=0 ENVKIT_EXPERIMENT=gpu-mnist docker/cuda/run.sh python recipes/mnist.py --device cuda"
        in experiment(project, repo_root, "gpu-mnist")[-1]
    )


def test_per_device_batch_for_the_batch_scaling_experiments(project, repo_root):
    assert experiment(project, repo_root, "tpu-mnist", "PER_DEVICE_BATCH=16")[-1].endswith(
        "--cores all --per-device-batch 16"
    )


def test_tpu_targets_differ_in_cores(project, repo_root):
    all_cores = experiment(project, repo_root, "tpu-mnist")
    assert all_cores[0] == ".venv/bin/envkit doctor --require tpu-vm"
    assert all_cores[-1].endswith("docker/tpu-vm/run.sh python recipes/mnist.py --device tpu --cores all")
    assert experiment(project, repo_root, "tpu-mnist-single")[-1].endswith(
        "docker/tpu-vm/run.sh python recipes/mnist.py --device tpu --cores 1"
    )


def test_model_reaches_the_cifar_experiments_only(project):
    assert dry_run(project, "gpu-dp-cifar", "MODEL=resnet50")[0].endswith("gpu-dp-cifar -- --model resnet50")
    assert dry_run(project, "cpu-mnist", "MODEL=resnet50")[0].endswith("cpu-mnist")


def test_cpu_ddp_cifar_is_a_make_target(project, repo_root):
    lines = experiment(project, repo_root, "cpu-ddp-cifar", "EPOCHS=1")
    assert lines[0] == ".venv/bin/envkit doctor --require cpu"
    assert lines[-1].endswith("docker/cpu/run.sh python recipes/cifar.py --device cpu --parallel ddp --epochs 1")


def test_multi_node_settings_reach_run_sh_quoted(project):
    line = dry_run(
        project,
        "gpu-ddp-cifar",
        "NNODES=2",
        "NODE_RANK=1",
        "RDZV_ENDPOINT=node0:29500",
        "RDZV_ID=job 7",
        "NCCL_SOCKET_IFNAME=eth0",
        "GLOO_SOCKET_IFNAME=it's",
    )[0]
    assert line.startswith(
        "NNODES='2' NODE_RANK='1' RDZV_ENDPOINT='node0:29500' RDZV_ID='job 7' "
        "NCCL_SOCKET_IFNAME='eth0' GLOO_SOCKET_IFNAME='it'\\''s' .venv/bin/envkit experiment "
    )
    assert shlex.split(line)[5] == "GLOO_SOCKET_IFNAME=it's"
    assert dry_run(project, "gpu-ddp-cifar")[0].startswith(".venv/bin/envkit experiment "), "unset: not passed"


def test_help_lists_the_launch_variables(project):
    done = make(project, "help")
    assert "ON GPUS_PER_NODE HOSTS LAUNCH_FLAGS" in done.stdout and "make gpu-ddp-cifar ON=slurm" in done.stdout


def test_on_submits_the_experiment_through_envkit_launch(project, repo_root):
    lines = dry_run(
        project,
        "gpu-ddp-cifar",
        "ON=slurm",
        "NNODES=2",
        "GPUS_PER_NODE=4",
        "EPOCHS=1",
        "GLOO_SOCKET_IFNAME=eth0",
        "DRY_RUN=1",
        "RESULTS_DIR=/r",
        "DATA_DIR=/d",
    )
    assert lines == [
        ".venv/bin/envkit launch gpu-ddp-cifar --on 'slurm' --nodes '2' --gpus-per-node '4' --results-dir /r "
        "--data-dir /d --env 'GLOO_SOCKET_IFNAME=eth0' --dry-run -- --epochs 1"
    ]
    script = launched(repo_root, lines[0])
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=4\n" in script
    assert "\nexport GLOO_SOCKET_IFNAME=eth0\n" in script
    # The experiment's own arguments come from the table, the user's flags after them; the image (podman) mounts the dirs.
    assert "-v /d:/workspace/data -v /r:/workspace/results " in script
    assert "-e ENVKIT_DATA_DIR -e ENVKIT_RESULTS_DIR -e ENVKIT_DEVICE -e GLOO_SOCKET_IFNAME " in script
    assert "recipes/cifar.py --device cuda --parallel ddp --epochs 1\n" in script


def test_on_passes_only_what_was_set_quoted(project, repo_root):
    line = dry_run(
        project,
        "cpu-ddp-cifar",
        "ON=hosts",
        "NNODES=2",
        "HOSTS=a,b'c",
        "REGISTRY=reg.example:5000/team",
        "NCCL_SOCKET_IFNAME=ib 0",
        "RDZV_ENDPOINT=x:1",
        "LAUNCH_FLAGS=--nproc-per-node 2 --tag v1",
    )[0]
    words = shlex.split(line)
    assert words[:8] == [".venv/bin/envkit", "launch", "cpu-ddp-cifar", "--on", "hosts", "--nodes", "2", "--hosts"]
    assert words[8:12] == ["a,b'c", "--registry", "reg.example:5000/team", "--results-dir"]
    assert words[-6:] == ["--env", "NCCL_SOCKET_IFNAME=ib 0", "--nproc-per-node", "2", "--tag", "v1"]
    # envkit launch sets the rendezvous itself; no recipe flags were given, so no '--'.
    assert "RDZV_ENDPOINT" not in line and "--" not in words
    assert dry_run(project, "tpu-mnist", "ON=tpu-pod")[0].startswith(
        ".venv/bin/envkit launch tpu-mnist --on 'tpu-pod' --results-dir "
    )


def test_on_makes_every_experiment_target_launch(project):
    experiments = load_experiments()
    assert experiments, "the project has no experiments"
    for name in experiments:
        (line,) = dry_run(project, name, "ON=skypilot", "MODEL=resnet50")
        assert line.startswith(f".venv/bin/envkit launch {name} --on 'skypilot' ") and " experiment " not in line
        assert line.endswith("-- --model resnet50") == name.endswith("cifar"), line


def test_an_unknown_engine_is_envkit_launchs_one_line(project, repo_root):
    done = launch(repo_root, dry_run(project, "gpu-ddp-cifar", "ON=nomad")[0])
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "invalid choice: 'nomad'" in done.stderr


@pytest.mark.parametrize("gpus", ["0,x", "0,", "-1", "all,0", "0;rm"])
def test_invalid_gpus_is_one_clear_line(project, gpus):
    done = make(project, "-n", "gpu-dp-cifar", f"GPUS={gpus}")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert f"GPUS='{gpus}' is invalid: give comma-separated GPU indices" in done.stderr


def test_the_gpus_syntax_is_envkit_s_data(project):
    """make reads GPUS's syntax from kinds.yaml's gpu_indices, as doctor, run.sh and the recipes do."""
    kinds = project / "envkit" / "data" / "kinds.yaml"
    assert "\ngpu_indices: '[0-9]+(,[0-9]+)*'\n" in kinds.read_text()
    kinds.write_text(kinds.read_text().replace("gpu_indices: '[0-9]+(,[0-9]+)*'", "gpu_indices: '[0-3]'"))
    assert make(project, "-n", "gpu-dp-cifar", "GPUS=2").returncode == 0
    assert "GPUS='0,1' is invalid" in make(project, "-n", "gpu-dp-cifar", "GPUS=0,1").stderr


def test_the_results_folder_is_the_run_wrapper_s(project):
    """make's RESULTS_DIR default is the wrapper's RESULTS_FOLDER, read from envkit/support/provenance_records.py."""
    show = ["-s", "--eval=results-dir: ; @echo $(RESULTS_DIR)", "results-dir"]
    assert make(project, *show).stdout == f"{project}/{RESULTS_FOLDER}\n"
    records = project / "envkit" / "support" / "provenance_records.py"
    records.write_text(records.read_text().replace(f'RESULTS_FOLDER = "{RESULTS_FOLDER}"', 'RESULTS_FOLDER = "runs"'))
    assert make(project, *show).stdout == f"{project}/runs\n"


def test_build_options_reach_envkit_build(project):
    lines = dry_run(
        project,
        "build-cpu",
        "WHEELHOUSE=/w",
        "BASE_IMAGE=envkit-base:x",
        "NO_CACHE=1",
        "CA_CERTS=/a.crt /b.crt",
        "BUILD_ARGS=HTTP_PROXY=http://p:3128",
    )
    assert lines == [
        ".venv/bin/envkit build cpu --no-cache --base-image envkit-base:x --wheelhouse /w "
        "--ca-cert /a.crt --ca-cert /b.crt --build-arg HTTP_PROXY=http://p:3128"
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_build_targets(project, kind):
    assert dry_run(project, f"build-{kind}") == [f".venv/bin/envkit build {kind}"]


def test_stale_render_is_rendered_first(project):
    _age(project / "envkit.yaml", 0)
    lines = dry_run(project, "cpu-mnist")
    # render rewrites only files whose content differs; the stamp, not docker/, records that it ran
    assert lines[:2] == [
        ".venv/bin/envkit render --target cpu",
        "mkdir -p .cache/rendered && touch .cache/rendered/cpu",
    ]
    assert lines[2].startswith(".venv/bin/envkit experiment ") and lines[2].endswith(" cpu-mnist")


def test_a_missing_rendered_file_is_rendered(project):
    (project / "docker" / "cuda" / "run.sh").unlink()
    assert dry_run(project, "build-cuda")[0] == ".venv/bin/envkit render --target cuda"
    assert dry_run(project, "build-cpu") == [".venv/bin/envkit build cpu"]


def test_edited_template_re_renders(project):
    _age(project / "templates" / "Dockerfile.j2", 0)
    assert dry_run(project, "build-tpu-vm")[0] == ".venv/bin/envkit render --target tpu-vm"


def test_a_new_version_matrix_re_renders(project):
    _age(project / "envkit" / "data" / "matrix.yaml", 0)
    assert dry_run(project, "build-cuda")[0] == ".venv/bin/envkit render --target cuda"


def test_render_target_renders_everything(project):
    assert dry_run(project, "render") == [".venv/bin/envkit render --all"]


def test_missing_venv_is_created_from_the_dev_lock(project):
    lines = dry_run(project, "cpu-mnist", "VENV=/tmp/elsewhere", "PYTHON=python3.11")
    assert lines[:3] == [
        "python3.11 -m envkit.host.venv requirements/dev.lock --path /tmp/elsewhere",
        "/tmp/elsewhere/bin/pip install --no-deps -e .",
        "touch /tmp/elsewhere/bin/envkit",
    ]
    assert lines[3].startswith("/tmp/elsewhere/bin/envkit experiment ") and lines[3].endswith(" cpu-mnist")


def test_a_new_dev_lock_remakes_the_venv(project):
    assert dry_run(project, "venv") == ["make: Nothing to be done for 'venv'."]
    _age(project / "requirements" / "dev.lock", 0)
    assert dry_run(project, "venv")[0] == "python3 -m envkit.host.venv requirements/dev.lock --path .venv"


@pytest.mark.parametrize("name", ["xla", "sky", "tpu", "bench"])
def test_side_environments_come_from_their_requirements(project, name):
    assert dry_run(project, f"{name}-env") == [
        f".venv/bin/envkit venv --requirements requirements/{name}.in --path .venv-{name}",
        f"touch .venv-{name}/bin/python",
    ]


@pytest.mark.parametrize(("changed", "remade"), [("xla.lock", True), ("xla.in", True), ("sky.lock", False)])
def test_a_side_environment_is_remade_when_its_input_or_its_lock_changes(project, changed, remade):
    (project / ".venv-xla" / "bin").mkdir(parents=True)
    (project / ".venv-xla" / "bin" / "python").write_text("")
    _age(project / ".venv-xla" / "bin" / "python", 100)
    _age(project / "requirements" / changed, 0)
    assert (dry_run(project, "xla-env") != ["make: Nothing to be done for 'xla-env'."]) == remade


def made_before_the_suite(ci: str) -> list[str]:
    """The targets of .ci/run's make lines before `make test`, in order (its options left out)."""
    before = ci[: ci.index("\nmake test")]
    lines = [line.split()[1:] for line in before.splitlines() if line.startswith("make ")]
    return [word for words in lines for word in words if not word.startswith("-")]


def test_ci_checks_skypilot_and_the_kubernetes_schemas(repo_root):
    ci = (repo_root / ".ci" / "run").read_text()
    assert "sky-env" in made_before_the_suite(ci)
    made = next(n for n, line in enumerate(ci.splitlines()) if line.startswith("make ") and "sky-env" in line)
    assert ci.splitlines()[made + 1] == 'export ENVKIT_SKY_PYTHON="$PWD/.venv-sky/bin/python"'
    assert "ENVKIT_REQUIRE_K8S_SCHEMAS=1" in ci and "ENVKIT_REQUIRE_SKY=1" in ci


def test_ci_requires_the_torch_tpu_and_xla_environments(repo_root):
    ci = (repo_root / ".ci" / "run").read_text()
    assert {"tpu-env", "xla-env"} <= set(made_before_the_suite(ci))
    assert "ENVKIT_REQUIRE_TPU_ENV=1" in ci and "ENVKIT_REQUIRE_XLA=1" in ci


def test_sharing_targets(project):
    assert dry_run(project, "push", "REGISTRY=reg.example.com:5000/team", "TARGET=cuda") == [
        ".venv/bin/envkit push cuda --registry reg.example.com:5000/team"
    ]
    assert dry_run(project, "save", "IMAGES_DIR=/out") == [".venv/bin/envkit save cpu --output-dir /out"]
    assert dry_run(project, "load", "FILE=/out/envkit-cpu-0123456789ab.tar.gz") == [
        ".venv/bin/envkit load /out/envkit-cpu-0123456789ab.tar.gz"
    ]

    assert dry_run(project, "prune") == [".venv/bin/envkit prune cpu"]
    assert dry_run(project, "prune", "TARGET=cuda", "KEEP=2", "DRY_RUN=1") == [
        ".venv/bin/envkit prune cuda --keep 2 --dry-run"
    ]
    assert envkit_calls(project) == [["prune", "cuda", "--keep", "2", "--dry-run"]], "DRY_RUN runs envkit's own dry run"


@pytest.mark.parametrize("target, variable", [("push", "REGISTRY"), ("load", "FILE")])
def test_sharing_targets_need_their_variable(project, target, variable):
    done = make(project, "-n", target)
    assert done.returncode == 2
    assert f"{variable} is empty" in done.stderr and done.stderr.count("\n") == 1


def test_report_and_test_targets(project):
    assert dry_run(project, "compare", "RESULTS_DIR=/r", "EPOCHS=1", "DATASET=fake") == [
        ".venv/bin/envkit compare --results-dir /r --html /r/comparison.html --epochs 1 --dataset fake"
    ]
    assert dry_run(project, "demo") == [".venv/bin/envkit demo"]
    assert dry_run(project, "test") == ["scripts/test-suite.sh .venv/bin/pytest"]
    assert dry_run(project, "test", "PYTEST_ARGS=tests/runs -x") == [
        ".venv/bin/pytest --slow --durations=30 tests/runs -x"
    ]


def test_an_experiment_stops_before_building_when_the_host_cannot_run_it(project, tmp_path, repo_root):
    venv = Path(sys.executable).parent.parent  # a real envkit, so the host check really runs
    shutil.copy(repo_root / "envkit.yaml", project / "envkit.yaml")  # which it reads to find the target
    # `python -m envkit` puts the project first on sys.path: the stand-in envkit/data/ folder would
    # shadow an editable install as an empty namespace package (in envkit's own tree it is the package).
    shutil.rmtree(project / "envkit")
    _age(project / "envkit.yaml", 300)
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no.sock"}
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(project), "cpu-mnist", f"VENV={venv}"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 2
    assert "envkit: error: this host cannot run cpu images: no Docker engine answers" in done.stderr
    assert "start one with" in done.stderr
    assert " build " not in done.stdout  # nothing was built


def test_dry_run_makes_an_experiment_target_a_dry_run(project):
    """Before: DRY_RUN reached only prune and ON= launches; `make cpu-mnist DRY_RUN=1` built and ran."""
    done = make(project, "cpu-mnist", "DRY_RUN=1", "EPOCHS=1", "RESULTS_DIR=/r", "DATA_DIR=/d")
    assert done.returncode == 0, done.stderr
    assert envkit_calls(project) == [
        ["experiment", "--results-dir", "/r", "--data-dir", "/d", "--dry-run", "cpu-mnist", "--", "--epochs", "1"]
    ]


def help_targets(project: Path) -> list[str]:
    return [
        line.split()[0] for line in make(project, "help").stdout.splitlines() if re.match(r"  [a-z][a-z0-9-]* ", line)
    ]


def test_every_target_honours_dry_run(project):
    """DRY_RUN=1 on any target prints what it would run and changes nothing; envkit runs only its own dry runs."""
    _age(project / "templates" / "Dockerfile.j2", 0)  # every target's render is stale: it must be printed, not run
    (project / "requirements" / "dev.txt").touch()  # the venv too
    before = tree(project)
    targets = help_targets(project)
    assert {"render", "build-cpu", "push", "prune", "save", "load", "cpu-mnist", "compare", "demo", "test"} <= set(
        targets
    )
    for target in targets:
        done = make(project, target, "DRY_RUN=1", "REGISTRY=reg.example:5000/team", "FILE=images/x.tar.gz")
        assert done.returncode == 0, (target, done.stderr)
        assert done.stdout.strip(), f"{target} printed nothing"
        assert tree(project) == before, f"make {target} DRY_RUN=1 changed a file"
    ran = envkit_calls(project)
    assert ran and all("--dry-run" in call for call in ran), ran
    assert {call[0] for call in ran} == {"experiment", "compare", "demo", "prune"}


def test_dry_run_without_envkit_prints_the_envkit_line_too(project):
    (project / ".venv" / "bin" / "envkit").unlink()
    done = make(project, "cpu-mnist", "DRY_RUN=1")
    assert done.returncode == 0, done.stderr
    lines = [" ".join(line.split()) for line in done.stdout.splitlines()]
    assert lines[0] == "python3 -m envkit.host.venv requirements/dev.lock --path .venv" and lines[-1].endswith(
        "--dry-run cpu-mnist"
    )
    assert not (project / ".venv" / "bin" / "envkit").exists()


def test_a_fresh_clone_renders_by_content_and_changes_nothing(tmp_path, repo_root):
    """Checkout order makes envkit.yaml look newer than docker/: make runs render, which writes nothing.

    Before: the render rule touched docker/<target>/Dockerfile and run.sh on every fresh clone.
    A real envkit (this checkout's) renders; no Docker engine answers, so the experiment stops at its host check.
    """
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(repo_root), str(clone)], check=True, capture_output=True)
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=repo_root, check=True, capture_output=True).stdout
    for name in filter(None, tracked.decode().split("\0")):  # this checkout's files, edits included
        if (repo_root / name).is_file() and not (repo_root / name).is_symlink():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo_root / name, clone / name)
    for path in clone.rglob("*"):
        if path.is_file() and ".git" not in path.parts:
            _age(path, 600)
    _age(clone / "envkit.yaml", 0)  # the config checked out last
    docker = tree(clone / "docker")
    venv = Path(sys.executable).parent.parent  # older than the clone's requirements: make keeps it
    env = {**os.environ, "PYTHONPATH": str(clone), "DOCKER_HOST": f"unix://{tmp_path}/no.sock"}
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(clone), "tpu-mnist", f"VENV={venv}"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 2 and "this host cannot run tpu-vm images" in done.stderr, done.stderr
    assert "render --target tpu-vm" in done.stdout and "(0 changed)" in done.stdout
    assert tree(clone / "docker") == docker, "no file under docker/ was written or touched"
    again = subprocess.run(
        ["make", "--no-print-directory", "-C", str(clone), "-n", "tpu-mnist", f"VENV={venv}"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert "render --target" not in again.stdout, "the stamp records the render"

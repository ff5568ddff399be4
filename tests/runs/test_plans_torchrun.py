"""A ``scale: torchrun`` experiment starts under torchrun in its image too (issue 32 §7): envkit experiment's and
make's run.sh step, envkit demo's run in the cpu image. Before, those ran ``run.sh python ddp.py`` as plain python
(KeyError: 'LOCAL_RANK'); only a run on a host started torchrun. tests/example_project's ddp.py is a torchrun script."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import paths
import pytest

from envkit.cli import main
from envkit.runs.plans import demo_plan
from envkit.runs.torchrun import CPU_DDP_PROCESSES

ENVKIT = str(Path(sys.executable).with_name("envkit"))
TORCHRUN = "python -m torch.distributed.run --standalone --local-addr 127.0.0.1 --nproc-per-node"
# A host whose Docker engine answers: the demo runs in the cpu image.
DOCKER = SimpleNamespace(gpus=[], devices={}, docker_version="27.3.1", docker_error=None)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """The example project after envkit init: ddp (scale: torchrun, it reads LOCAL_RANK), train and train-dvclive
    (single)."""
    root = tmp_path_factory.mktemp("torchrun") / "repo"
    shutil.copytree(paths.TESTS / "example_project", root)
    assert main(["init", "--dir", str(root)]) == 0
    return root


def dry_run(capsys, repo: Path, *argv: str) -> str:
    assert main(["experiment", "--config", str(repo / "envkit.yaml"), "--dry-run", *argv]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("target", "processes"),
    # the CPU stand-in processes a host run starts too; on GPUs, every GPU run.sh gives the container (GPUS)
    [("cpu", str(CPU_DDP_PROCESSES)), ("cuda", "gpu")],
)
def test_envkit_experiment_starts_a_torchrun_script_under_torchrun_in_the_image(repo, capsys, target, processes):
    out = dry_run(capsys, repo, "ddp", "--target", target)
    # on a CPU its processes share one thread budget in the image too, passed in by run.sh
    threads = max(1, len(os.sched_getaffinity(0)) // CPU_DDP_PROCESSES)
    env = f"OMP_NUM_THREADS={threads} ENVKIT_ENV=OMP_NUM_THREADS " if target == "cpu" else ""
    started = f"{repo}/docker/{target}/run.sh {TORCHRUN} {processes} ddp.py\n"
    assert out.endswith(f"ENVKIT_EXPERIMENT=ddp {env}{started}"), out


def test_a_single_process_script_and_the_users_arguments_are_as_they_were(repo, capsys):
    assert dry_run(capsys, repo, "train", "--target", "cpu").endswith("/docker/cpu/run.sh python train.py\n")
    out = dry_run(capsys, repo, "ddp", "--target", "cpu", "--", "--steps", "3")
    assert out.endswith(f"/docker/cpu/run.sh {TORCHRUN} 2 ddp.py --steps 3\n"), out


def test_a_gpu_torchrun_script_run_here_as_a_cpu_stand_in_starts_the_cpus_processes(repo, capsys, monkeypatch):
    # Before, --allow-cpu started `--nproc-per-node gpu`, which torchrun refuses without CUDA ("Cuda is not
    # available"): the stand-in never ran.
    monkeypatch.setenv("PATH", str(repo / "no-such-bin"))  # no nvidia-smi: this host has no GPU
    here = ("ddp", "--target", "cuda", "--python", sys.executable)
    stand_in = dry_run(capsys, repo, *here, "--allow-cpu")
    assert f"{TORCHRUN} {CPU_DDP_PROCESSES} ddp.py\n" in stand_in and "OMP_NUM_THREADS=" in stand_in, stand_in
    assert "ENVKIT_TARGET=cuda" in stand_in  # still the cuda target's run, told the device it has (issue 40 §8)
    assert "ENVKIT_DEVICE=cpu" in stand_in and "ENVKIT_TARGET_DEVICE=cuda" in stand_in  # its record's label
    # without --allow-cpu the plan is the GPU host's (the run itself is refused in one line before it starts)
    assert dry_run(capsys, repo, *here).endswith(f"{TORCHRUN} gpu ddp.py\n")


def test_make_runs_it_under_torchrun(repo):
    done = subprocess.run(
        ["make", "-s", "ddp", f"ENVKIT={ENVKIT}", "DRY_RUN=1"], cwd=repo, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert f"docker/cpu/run.sh {TORCHRUN} 2 ddp.py\n" in done.stdout, done.stdout


def test_the_demo_runs_it_under_torchrun_in_the_cpu_image(repo, tmp_path):
    plan = demo_plan(tmp_path / "results", config=repo / "envkit.yaml", facts=DOCKER, use_docker=True)
    run_sh = str(repo / "docker" / "cpu" / "run.sh")
    in_image = {step.argv[1:][-1]: step.argv[1:] for step in plan.steps if step.argv[0] == run_sh}
    assert in_image == {
        "ddp.py": ("python", *TORCHRUN.split()[1:], "2", "ddp.py"),
        "train.py": ("python", "train.py"),
        "train_dvclive.py": ("python", "train_dvclive.py"),
    }

"""The slurm engine: the sbatch script, its container runtimes, and the host script run for real (--slow)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from launch_jobs import FAKE_DATA, make_job
from paths import REPO_ROOT

from envkit.launch import slurm


def test_slurm_script_asks_for_what_the_issue_names():
    script = slurm.sbatch_script(make_job("gpu-ddp-cifar", "slurm", gpus_per_node=4))
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=4\n" in script
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1' in script
    assert "sacct" not in script


def test_single_host_experiment_runs_without_torchrun():
    job = make_job("gpu-dp-cifar", "slurm", nodes=1, gpus_per_node=4, options=dict(container="host"))
    wrapper = "python /srv/envkit/docker/cuda/envkit_run.py"  # the run wrapper beside run.sh writes the results
    assert f"srun --ntasks-per-node=1 --chdir=/srv/envkit {wrapper} python recipes/cifar.py" in slurm.sbatch_script(job)
    in_image = slurm.sbatch_script(make_job("gpu-dp-cifar", "slurm", nodes=1, gpus_per_node=4))
    assert " envkit-cuda:latest python /opt/envkit/envkit_run.py python recipes/cifar.py" in in_image


def test_slurm_runs_the_image_under_podman_by_default():
    assert slurm.ENGINE.settings({}).container == "podman"
    script = slurm.sbatch_script(make_job("cpu-ddp-cifar", "slurm"))
    assert "container podman." in script and "\nsrun --ntasks-per-node=1 podman run " in script
    assert "export ENVKIT_DATA_DIR=/workspace/data\n" in script and " -e ENVKIT_DATA_DIR " in script
    assert "recipes/cifar.py --device cpu --parallel ddp\n" in script, "nothing added to the recipe's arguments"


# ------------------------------------------------------------------ the command line


@pytest.mark.slow  # two gloo processes train for real (~40 s)
def test_slurm_host_script_trains_when_srun_runs_its_task_here(tmp_path):
    """The rendered host-environment script, run by bash with srun/scontrol stand-ins that keep
    the task on this machine: torchrun's flags and the rendezvous are right, one results file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho localhost\n")
    # srun's own options go, but --chdir, where the task runs (the project's root), as srun would.
    (bin_dir / "srun").write_text(
        '#!/bin/bash\nwhile [[ $1 == --* ]]; do [[ $1 == --chdir=* ]] && cd "${1#--chdir=}"; shift; done\nexec "$@"\n'
    )
    for fake in bin_dir.iterdir():
        fake.chmod(0o755)
    job = make_job(
        "cpu-ddp-cifar",
        "slurm",
        nodes=1,
        nproc_per_node=2,
        root=REPO_ROOT,
        data_dir=tmp_path / "data",
        results_dir=tmp_path / "results",
        options=dict(container="host"),
        extra_args=FAKE_DATA,
    )
    script = tmp_path / "job.sbatch"
    script.write_text(slurm.sbatch_script(job))
    env = {
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_NNODES": "1",
        "SLURM_JOB_ID": "7",
    }
    done = subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list((tmp_path / "results").glob("*.json"))) == 1  # rank 0 alone writes it

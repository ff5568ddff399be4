"""A real two-node Slurm cluster on this machine runs recipes/cifar.py DDP through sbatch, issue 15 §3 (slow: ~1 min).

Debian's munged, slurmctld and slurmd in network namespaces (tests/multihost.py);
``sbatch --wait`` submits the job and returns its exit code, with no accounting.
Run with ``pytest --slow tests/test_slurm.py`` as root.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from multihost import NODE_INTERFACE, SlurmCluster, two_node_slurm  # noqa: E402, F401 - two_node_slurm is a fixture
from test_cifar_ddp import RECIPE, TRAINING, data_dir, only_results  # noqa: E402, F401 - data_dir is a fixture

pytestmark = pytest.mark.slow
RENDEZVOUS_PORT = 29500


def job_script(nodes: int, recipe_argv: list[str]) -> str:
    """The sbatch script under test: host Python environment, one torchrun per node, rendezvous on the first host.

    The one place the job text comes from: envkit launch's rendered Slurm script replaces it.
    """
    command = shlex.join([sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc-per-node", "1",
                          "--rdzv-backend", "c10d", "--rdzv-id", "envkit"])
    return f"""#!/bin/bash
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
set -euo pipefail
first_host=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export GLOO_SOCKET_IFNAME={NODE_INTERFACE} OMP_NUM_THREADS=1
srun {command} --rdzv-endpoint="$first_host:{RENDEZVOUS_PORT}" -- {shlex.join([str(RECIPE), *recipe_argv])}
"""


def submit_and_wait(cluster: SlurmCluster, script: str, directory: Path) -> tuple[int, str, str]:
    """``sbatch --wait``: the job's exit code as sbatch returns it, the job id, and the job's output."""
    directory.mkdir()
    (directory / "job.sh").write_text(script)
    output = directory / "slurm-%j.out"
    done = subprocess.run(cluster.command("sbatch", "--wait", f"--chdir={directory}", f"--output={output}", str(directory / "job.sh")),
                          capture_output=True, text=True, timeout=300)
    match = re.search(r"Submitted batch job (\d+)", done.stdout)
    assert match, f"sbatch did not submit ({done.returncode}): {done.stderr}"
    job = match[1]
    return done.returncode, job, (directory / f"slurm-{job}.out").read_text()


def recorded_exit_code(cluster: SlurmCluster, job: str) -> int:
    """The job's exit code as slurmctld keeps it (scontrol, not accounting)."""
    shown = subprocess.run(cluster.command("scontrol", "show", "job", job), capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    return int(re.search(r"\bExitCode=(\d+):\d+", shown.stdout)[1])


def test_sbatch_runs_ddp_on_both_nodes_and_returns_the_exit_code(tmp_path, data_dir, two_node_slurm):
    sinfo = subprocess.run(two_node_slurm.command("sinfo", "--noheader", "--Node", "--format=%N %t"),
                           capture_output=True, text=True, timeout=30)
    assert sinfo.stdout.split("\n")[:2] == ["node1 idle", "node2 idle"], sinfo.stdout

    recipe_argv = [*TRAINING, "--epochs", "1", "--data-dir", str(data_dir), "--parallel", "ddp", "--show-scatter"]
    returncode, job, output = submit_and_wait(two_node_slurm, job_script(2, [*recipe_argv, "--results-dir", "results"]), tmp_path / "good")
    assert returncode == 0, output[-3000:]
    assert recorded_exit_code(two_node_slurm, job) == 0
    # Both ranks ran, each on half of the global batch; rank 0, on the first host, alone wrote results.
    for rank in (0, 1):
        assert output.count(f"scatter (ddp rank {rank}/2, cpu): input [8, 3, 64, 64]") == 1, output[-3000:]
    results = only_results(tmp_path / "good" / "results")
    assert results["environment"]["host"] == "node1"
    assert results["configuration"]["world_size"] == 2

    # A job that fails: sbatch --wait returns its exit code (the one slurmctld recorded), and nothing was written.
    returncode, job, output = submit_and_wait(two_node_slurm, job_script(2, [*recipe_argv, "--global-batch", "15"]), tmp_path / "bad")
    assert returncode != 0
    assert returncode == recorded_exit_code(two_node_slurm, job)
    assert "does not divide over 2 replicas" in output
    assert not (tmp_path / "bad" / "results").exists()

"""A real two-node Slurm cluster on this machine runs recipes/cifar.py DDP through sbatch, issue 15 §3 (slow: ~1 min).

Debian's munged, slurmctld and slurmd in network namespaces (tests/multihost.py);
``sbatch --wait`` submits the job and returns its exit code, with no accounting.
Run with ``pytest --slow tests/test_slurm.py`` as root.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from multihost import (  # noqa: E402, F401 - two_node_slurm is a fixture
    NODE_INTERFACE, SlurmCluster, slurm_job_script, two_node_slurm,
)
from test_cifar_ddp import TRAINING, data_dir, only_results  # noqa: E402, F401 - data_dir is a fixture

pytestmark = pytest.mark.slow


def recorded_exit_code(cluster: SlurmCluster, job: str) -> int:
    """The job's exit code as slurmctld keeps it (scontrol, not accounting)."""
    shown = subprocess.run(cluster.command("scontrol", "show", "job", job), capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    return int(re.search(r"\bExitCode=(\d+):\d+", shown.stdout)[1])


def test_sbatch_runs_ddp_on_both_nodes_and_returns_the_exit_code(tmp_path, data_dir, two_node_slurm):
    sinfo = subprocess.run(two_node_slurm.command("sinfo", "--noheader", "--Node", "--format=%N %t"),
                           capture_output=True, text=True, timeout=30)
    assert sinfo.stdout.split("\n")[:2] == ["node1 idle", "node2 idle"], sinfo.stdout

    def submit(label: str, recipe_argv: list[str]) -> tuple[int, str, str, Path]:
        """The rendered script of ``envkit launch cpu-ddp-cifar --on slurm``, submitted from tmp_path/label."""
        directory, results = tmp_path / label, tmp_path / label / "results"
        script = slurm_job_script(2, [*TRAINING, "--epochs", "1", "--show-scatter", *recipe_argv], data_dir, results, directory)
        assert f"\nexport GLOO_SOCKET_IFNAME={NODE_INTERFACE}\n" in script and "\nsrun --ntasks-per-node=1 torchrun " in script
        return (*two_node_slurm.sbatch_wait(script, directory), results)

    returncode, job, output, results_dir = submit("good", [])
    assert returncode == 0, output[-3000:]
    assert recorded_exit_code(two_node_slurm, job) == 0
    # Both ranks ran, each on half of the global batch; rank 0, on the first host, alone wrote results.
    for rank in (0, 1):
        assert output.count(f"scatter (ddp rank {rank}/2, cpu): input [8, 3, 64, 64]") == 1, output[-3000:]
    results = only_results(results_dir)
    assert results["environment"]["host"] == "node1"
    configuration = results["configuration"]
    assert (configuration["world_size"], configuration["nodes"], configuration["processes_per_node"]) == (2, 2, 1)

    # A job that fails: sbatch --wait returns its exit code (the one slurmctld recorded), and nothing was written.
    returncode, job, output, results_dir = submit("bad", ["--global-batch", "15"])
    assert returncode != 0
    assert returncode == recorded_exit_code(two_node_slurm, job)
    assert "does not divide over 2 replicas" in output
    assert list(results_dir.rglob("*")) == []  # the script made the directory; the recipe wrote nothing

"""Several hosts, and a Slurm cluster on them, on this one machine: for the multi-host tests and benchmark.

The hosts are network namespaces made by ``scripts/netns-hosts.sh`` (a hub with a
bridge, ``node1`` .. ``nodeN``, each with its own host name and an /etc/hosts
naming all of them); the cluster is Debian's munged, slurmctld and slurmd started
in them by ``scripts/slurm-cluster.sh``. Both are torn down when the ``with`` block
or fixture ends, also when the test fails: every daemon by its recorded PID,
then whatever a job left inside the namespaces, then the namespaces.

Without root or the tools, tests skip with the reason; with ENVKIT_REQUIRE_SLURM=1
(CI) they fail instead.

Plain helpers: tests/host and benchmarks/bench_multihost.py import them by name, which a conftest does not
allow. The fixtures built on them (two_hosts, two_node_slurm) are in tests/integration/conftest.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from paths import REPO_ROOT

SCRIPTS = REPO_ROOT / "scripts"
HOSTS_SCRIPT = SCRIPTS / "netns-hosts.sh"
CLUSTER_SCRIPT = SCRIPTS / "slurm-cluster.sh"
NAMESPACE_TOOLS = ("ip", "nsenter", "unshare")
SLURM_TOOLS = (*NAMESPACE_TOOLS, "munged", "mungekey", "slurmctld", "slurmd", "sbatch", "sinfo", "srun", "scontrol")
# The interface each node host has on the hub's bridge (netns-hosts.sh): gloo must use it, not lo.
NODE_INTERFACE = "eth0"
RENDEZVOUS_PORT = 29500
CIFAR_RECIPE = REPO_ROOT / "recipes" / "cifar.py"


def missing(tools: tuple[str, ...]) -> str | None:
    """Why the hosts or the cluster cannot be made here (not root, tools not on PATH), or None."""
    absent = [tool for tool in tools if shutil.which(tool) is None]
    problems = []
    if absent:
        problems.append(
            f"{', '.join(absent)} not on PATH (apt-get install iproute2 util-linux munge "
            "slurmctld slurmd slurm-client slurm-wlm-basic-plugins)"
        )
    if os.geteuid() != 0:
        problems.append("network namespaces need root")
    return "; ".join(problems) or None


def require(tools: tuple[str, ...]) -> None:
    """Skip (or, with ENVKIT_REQUIRE_SLURM=1, fail) unless this is root and every tool is on PATH."""
    reason = missing(tools)
    if reason is None:
        return
    if os.environ.get("ENVKIT_REQUIRE_SLURM", "") not in ("", "0"):
        pytest.fail(f"ENVKIT_REQUIRE_SLURM=1 but {reason}")
    pytest.skip(reason)


def _script(*argv: str | Path, timeout: float = 120) -> None:
    done = subprocess.run(["bash", *map(str, argv)], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed ({done.returncode}): {done.stderr.strip()}")


@dataclass(frozen=True)
class Hosts:
    """Hosts ``node1`` .. ``node{count}`` (and ``hub``) from netns-hosts.sh, recorded in ``state``."""

    state: Path
    count: int

    @property
    def nodes(self) -> list[str]:
        return [f"node{k}" for k in range(1, self.count + 1)]

    def command(self, host: str, *argv: str) -> list[str]:
        """``argv`` run as ``host``: in its network namespace, under its host name and hosts file."""
        return ["bash", str(HOSTS_SCRIPT), "exec", str(self.state), host, *argv]


@dataclass(frozen=True)
class SlurmCluster:
    """A running cluster from slurm-cluster.sh, its files in ``directory``."""

    directory: Path
    hosts: Hosts

    def command(self, *argv: str) -> list[str]:
        """A Slurm client command (sbatch, sinfo, ...) run on the hub with this cluster's slurm.conf."""
        return ["bash", str(CLUSTER_SCRIPT), "exec", str(self.directory), *argv]

    def sbatch_wait(
        self, script: str, directory: Path, timeout: float = 300, env: dict[str, str] | None = None
    ) -> tuple[int, str, str]:
        """Submit ``script`` from ``directory`` with ``sbatch --wait``: the job's exit code as sbatch
        returns it, the job id, and the job's output. ``env`` adds variables for the job (sbatch exports them)."""
        directory.mkdir(exist_ok=True)
        (directory / "job.sh").write_text(script)
        # sbatch hands its environment to the job: this Python environment's python and torchrun come first on PATH.
        env = {
            **os.environ,
            **(env or {}),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
        }
        done = subprocess.run(
            self.command(
                "sbatch",
                "--wait",
                f"--chdir={directory}",
                f"--output={directory}/slurm-%j.out",
                str(directory / "job.sh"),
            ),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        submitted = re.search(r"Submitted batch job (\d+)", done.stdout)
        if submitted is None:
            raise RuntimeError(f"sbatch did not submit ({done.returncode}): {done.stderr.strip()}")
        job = submitted[1]
        return done.returncode, job, (directory / f"slurm-{job}.out").read_text()


@contextlib.contextmanager
def namespace_hosts(state: Path, count: int = 2) -> Iterator[Hosts]:
    require(NAMESPACE_TOOLS)
    try:
        _script(HOSTS_SCRIPT, "up", state, str(count))
        yield Hosts(state, count)
    finally:
        _script(HOSTS_SCRIPT, "down", state)


@contextlib.contextmanager
def slurm_cluster(directory: Path, count: int = 2) -> Iterator[SlurmCluster]:
    require(SLURM_TOOLS)
    try:
        _script(CLUSTER_SCRIPT, "up", directory, str(count))
        yield SlurmCluster(directory, Hosts(directory / "hosts", count))
    finally:
        _script(CLUSTER_SCRIPT, "down", directory)


def slurm_job_script(
    nodes: int,
    recipe_argv: list[str],
    data_dir: Path,
    results_dir: Path,
    output: Path,
    launch_args: tuple[str, ...] = ("--container", "host"),
    config: Path = REPO_ROOT / "envkit.yaml",
    experiment: str = "cpu-ddp-cifar",
) -> str:
    """The sbatch script that ``envkit launch EXPERIMENT --on slurm`` renders, as a user gets it
    (--dry-run --output): by default cpu-ddp-cifar with ``--container host``, recipes/cifar.py in the Python
    environment sbatch is called from; one torchrun per node (srun), rendezvous on the allocation's first host,
    gloo on the nodes' interface (--env). ``launch_args`` replace the container choice (e.g. podman and
    --registry)."""
    argv = [
        "launch",
        experiment,
        "--on",
        "slurm",
        *launch_args,
        "--nodes",
        str(nodes),
        "--config",
        str(config),
        "--data-dir",
        str(data_dir),
        "--results-dir",
        str(results_dir),
        # One thread per process: two nodes share this machine's cores.
        "--env",
        f"GLOO_SOCKET_IFNAME={NODE_INTERFACE}",
        "--env",
        "OMP_NUM_THREADS=1",
        "--dry-run",
        "--output",
        str(output),
        "--",
        *recipe_argv,
    ]
    done = subprocess.run(
        [sys.executable, "-m", "envkit", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    if done.returncode != 0:
        raise RuntimeError(f"envkit launch did not render the job ({done.returncode}): {done.stderr.strip()}")
    return (output / f"{experiment}.sbatch").read_text()


@contextlib.contextmanager
def podman_of_its_own(directory: Path, plain_http_registry: str) -> Iterator[dict[str, str]]:
    """A podman configured for this test alone, as the variables that select its files (sbatch hands them to
    every node's podman): its own storage (no other user of this machine's podman or buildah sees it),
    cgroupfs and file events (no systemd here), the local registry over plain http, and limits below this
    machine's hard ones (podman's defaults exceed them: runc fails with "error setting rlimit type 7").
    Everything it stored is removed when the block ends."""
    require(("podman",))
    directory.mkdir(parents=True)
    (directory / "storage.conf").write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{directory}/storage"\nrunroot = "{directory}/run"\n'
    )
    (directory / "containers.conf").write_text(
        '[containers]\ndefault_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]\n'
        f'[engine]\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\ntmp_dir = "{directory}/tmp"\n'
    )
    (directory / "registries.conf").write_text(f'[[registry]]\nlocation = "{plain_http_registry}"\ninsecure = true\n')
    env = {
        "CONTAINERS_STORAGE_CONF": str(directory / "storage.conf"),
        "CONTAINERS_CONF": str(directory / "containers.conf"),
        "CONTAINERS_REGISTRIES_CONF": str(directory / "registries.conf"),
    }
    try:
        yield env
    finally:
        subprocess.run(
            ["podman", "system", "reset", "--force"], env={**os.environ, **env}, capture_output=True, timeout=300
        )
        shutil.rmtree(directory, ignore_errors=True)


def torchrun_on_hosts(
    hosts: Hosts, script: Path, argv: list[str], cwd: Path, port: int = RENDEZVOUS_PORT, timeout: float = 600
) -> list[subprocess.CompletedProcess]:
    """One ``torchrun --nnodes N --nproc-per-node 1`` per node host, rendezvous (c10d) on node1; their results."""
    rendezvous = [
        "--nnodes",
        str(hosts.count),
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"node1:{port}",
        "--rdzv-id",
        f"envkit-{os.getpid()}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": NODE_INTERFACE}
    with contextlib.ExitStack() as files:
        # Files, not pipes: a host blocked on a full pipe would stall the collectives the other one waits in.
        outputs = [
            (files.enter_context(tempfile.TemporaryFile("w+")), files.enter_context(tempfile.TemporaryFile("w+")))
            for _ in hosts.nodes
        ]
        started = [
            subprocess.Popen(
                hosts.command(
                    node, sys.executable, "-m", "torch.distributed.run", *rendezvous, "--", str(script), *argv
                ),
                stdout=stdout,
                stderr=stderr,
                text=True,
                cwd=cwd,
                env=env,
            )
            for node, (stdout, stderr) in zip(hosts.nodes, outputs)
        ]
        finished = []
        for process, (stdout, stderr) in zip(started, outputs):
            process.wait(timeout=timeout)
            stdout.seek(0)
            stderr.seek(0)
            finished.append(subprocess.CompletedProcess(process.args, process.returncode, stdout.read(), stderr.read()))
        return finished

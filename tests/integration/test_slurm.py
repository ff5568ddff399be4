"""A real two-node Slurm cluster on this machine runs DDP through sbatch: recipes/cifar.py in the host's Python
(issue 15 §3, ~1 min), and a project's command experiment in its image under podman, pulled by the digest
envkit push recorded (issue 20 §5), one torchrun per node.

Debian's munged, slurmctld and slurmd in network namespaces (tests/multihost.py);
``sbatch --wait`` submits the job and returns its exit code, with no accounting.
Run with ``pytest --slow tests/integration/test_slurm.py`` as root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cifar_files import TRAINING, only_results
from docker_engine import (
    envkit,
    locked_build,
    manifest_digest,
)
from multihost import NODE_INTERFACE, SlurmCluster, podman_of_its_own, slurm_job_script
from paths import REPO_ROOT

from envkit.image.build_context import staging_path

pytestmark = pytest.mark.slow


def recorded_exit_code(cluster: SlurmCluster, job: str) -> int:
    """The job's exit code as slurmctld keeps it (scontrol, not accounting)."""
    shown = subprocess.run(cluster.command("scontrol", "show", "job", job), capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    return int(re.search(r"\bExitCode=(\d+):\d+", shown.stdout)[1])


def test_sbatch_runs_ddp_on_both_nodes_and_returns_the_exit_code(tmp_path, data_dir, two_node_slurm):
    sinfo = subprocess.run(
        two_node_slurm.command("sinfo", "--noheader", "--Node", "--format=%N %t"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert sinfo.stdout.split("\n")[:2] == ["node1 idle", "node2 idle"], sinfo.stdout

    def submit(label: str, recipe_argv: list[str]) -> tuple[int, str, str, Path]:
        """The rendered script of ``envkit launch cpu-ddp-cifar --on slurm``, submitted from tmp_path/label."""
        directory, results = tmp_path / label, tmp_path / label / "results"
        script = slurm_job_script(
            2, [*TRAINING, "--epochs", "1", "--show-scatter", *recipe_argv], data_dir, results, directory
        )
        assert (
            f"\nexport GLOO_SOCKET_IFNAME={NODE_INTERFACE}\n" in script
            # torchrun under the run wrapper, from the project's root as in the image
            and f"\nsrun --ntasks-per-node=1 --chdir={REPO_ROOT} python " in script
            and "/envkit_run.py torchrun " in script
        )
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
    # The recipe wrote nothing; the run wrapper recorded the failed run with its exit status (issue 25 §6).
    (record,) = results_dir.glob("*.json")
    assert json.loads(record.read_text())["run"]["exit_status"] == returncode


# ------------------------------------------------------------------ the image, by digest, under podman

# A command experiment of the session's locked offline cpu project (torch 2.13.0's CPU build from the local
# wheelhouse, about 1 GB): what moves through the registry is that image, not a 7 GB CUDA one. The experiment is
# a project's own script, started by torchrun on each node, that all-reduces over gloo. Its target is the
# project's own cpu, lock and Dockerfile unchanged: the build takes the session's locked image's layers (torch
# installed) from the engine's cache and adds only the project's files, instead of installing torch again
# under another target's name (whose lock, and so every layer from it on, differs).
PODMAN_TARGET = "cpu"
PODMAN_EXPERIMENT = "podman-ddp"
ALL_REDUCE = """\
import json, os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print(f"rank {rank}/{world} on node {os.environ['GROUP_RANK']}: sum {total.item():g}", flush=True)
if rank == 0:
    with open(os.path.join(os.environ["ENVKIT_METRICS_DIR"], "metrics.json"), "w") as out:
        json.dump({"world_size": world, "sum": total.item()}, out)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def podman_image(tmp_path_factory, client, locked, base_image) -> Iterator[tuple[Path, str]]:
    """A copy of the locked offline project with the podman experiment, its image built from the session's
    wheelhouse on the locked image's cached layers; the project and the image's content tag (envkit-cpu:<tag>)."""
    locked_root, wheels = locked
    project = tmp_path_factory.mktemp("podman") / "project"
    shutil.copytree(locked_root, project)
    (project / "recipes" / "all_reduce.py").write_text(ALL_REDUCE)  # recipes/: what the copied .dockerignore admits
    config = yaml.safe_load((project / "envkit.yaml").read_text())
    # Beside the project's seed-recipe experiments, which its lock's recipe packages (tqdm) are for: the lock stays
    # fresh.
    config["experiments"][PODMAN_EXPERIMENT] = {
        "summary": "an all-reduce over gloo, one process per node",
        "target": PODMAN_TARGET,
        "command": ["python", "recipes/all_reduce.py"],
        "gpus": "none",
        "scale": "torchrun",
    }
    (project / "envkit.yaml").write_text(yaml.safe_dump(config))
    envkit("render", "--all", "--config", "envkit.yaml", cwd=project)  # the lock is the target's, still fresh
    built = locked_build(project, wheels, base_image, target=PODMAN_TARGET).stdout.strip()
    yield project, built
    shutil.rmtree(staging_path(project, PODMAN_TARGET), ignore_errors=True)
    # Its content tag only: envkit-cpu:latest moved to it, and goes back to the locked image with the next build.
    client.images.remove(built)


def test_podman_job_runs_the_pushed_image_by_digest_on_both_nodes(
    request, tmp_path, client, podman_image, registry, two_node_slurm
):
    project, built = podman_image
    tag = built.split(":")[1]
    registry_path = f"{registry}/team"

    # envkit push records the digest the registry answered, and the image's ID.
    pushed = envkit("push", PODMAN_TARGET, "--registry", registry_path, "--tag", tag, cwd=project).stdout.split()
    repository = f"{registry_path}/envkit-{PODMAN_TARGET}"
    record = json.loads((project / "docker" / PODMAN_TARGET / "pushed.json").read_text())["images"][repository]
    digest, image_id = record[tag]["digest"], record[tag]["image_id"]
    assert record["latest"] == record[tag] and pushed[-1] == f"{repository}@{digest}"
    assert digest == manifest_digest(registry, f"team/envkit-{PODMAN_TARGET}", tag)
    assert image_id == client.images.get(built).id
    for reference in pushed[:2]:
        client.images.remove(reference)

    # The registry's copy goes as soon as podman has the image, and is never kept with pytest's last
    # temporary directories.
    registry_copy = tmp_path / "store"
    request.addfinalizer(lambda: shutil.rmtree(registry_copy, ignore_errors=True))
    with podman_of_its_own(tmp_path / "podman", registry) as podman_env:
        # The node hosts have no route to this registry (it listens in the root namespace), so the nodes'
        # podman store gets the image here, pulled by its digest as a node would; the job finds it there.
        pulled = subprocess.run(
            ["podman", "pull", "--quiet", f"{repository}@{digest}"],
            capture_output=True,
            text=True,
            env={**os.environ, **podman_env},
            timeout=1200,
        )
        assert pulled.returncode == 0, pulled.stderr[-2000:]
        assert f"sha256:{pulled.stdout.strip()}" == image_id  # podman and Docker know the image by one ID
        shutil.rmtree(registry_copy)

        def submit(label: str, launch_args: tuple[str, ...]) -> tuple[int, str, Path, str]:
            directory, results = tmp_path / label, tmp_path / label / "results"
            script = slurm_job_script(
                2,
                [],
                tmp_path / "data",
                results,
                directory,
                launch_args=launch_args,
                config=project / "envkit.yaml",
                experiment=PODMAN_EXPERIMENT,
            )
            returncode, _, output = two_node_slurm.sbatch_wait(script, directory, env=podman_env)
            return returncode, output, results, script

        # The default container is podman; --registry makes it the recorded digest.
        returncode, output, results, script = submit("by-digest", ("--registry", registry_path, "--tag", tag))
        assert (
            "container podman." in script
            and f" {repository}@{digest} python /opt/envkit/envkit_run.py torchrun " in script
            and script.rstrip().endswith(" recipes/all_reduce.py")
        ), script
        assert returncode == 0, output[-3000:]
        for rank in (0, 1):  # one process per node, each on its own node, both in the one all-reduce
            assert output.count(f"rank {rank}/2 on node {rank}: sum 3") == 1, output[-3000:]
        (record,) = results.glob(f"{PODMAN_EXPERIMENT}-*.json")  # the first node's wrapper alone writes one
        document = json.loads(record.read_text())
        environment = document["environment"]
        assert (environment["image"], environment["image_id"], environment["image_digest"]) == (
            f"{repository}@{digest}",
            image_id,
            digest,
        )
        assert environment["host"] == "node1"
        assert (document["run"]["experiment"], document["run"]["exit_status"]) == (PODMAN_EXPERIMENT, 0)
        assert document["metrics"] == {"world_size": 2, "sum": 3.0}

        # An image no node can get: each node says so in one line, the job exits 2, and nothing is written.
        absent = f"{repository}@sha256:{'0' * 64}"
        returncode, output, results, _ = submit("absent", ("--image", absent))
        assert returncode == 2, output[-3000:]
        said = [line for line in output.splitlines() if line.startswith("envkit: ")]
        assert sorted(line.split(":")[1] for line in said) == [" node1", " node2"], output[-3000:]
        assert all(f"podman cannot run {absent}: " in line for line in said)
        assert not results.exists()

"""Jobs for the launch tests: fixed paths, so that renders are the same on every machine.

Plain helpers, imported by name: the image tests and tests/docker_engine.py use some of them, and test_job.py
imports CASES in a child process, so they cannot live in a conftest. The launch fixtures (project, fake_path)
are in tests/launch/conftest.py.
"""

from __future__ import annotations

import json
import shlex
import stat
from pathlib import Path

from paths import REPO_ROOT

from envkit.cli import main
from envkit.image.build import repository
from envkit.image.pushed import Pushed, record
from envkit.launch.engines import build_job
from envkit.project.experiments import Experiment, experiment
from envkit.project.load import load_config

ROOT = Path("/srv/envkit")
OUTPUT = Path("jobs")
# What envkit launch passes once the image was pushed (envkit push's record) or saved (envkit save's manifest).
DIGEST = "sha256:" + "0123456789abcdef" * 4
IMAGE_ID = "sha256:" + "fedcba9876543210" * 4
# The seed cifar recipe on a few generated images: a real DDP run in seconds (the Slurm tests).
FAKE_DATA = (
    "--dataset",
    "fake",
    "--epochs",
    "1",
    "--image-size",
    "32",
    "--global-batch",
    "16",
    "--fake-train-size",
    "64",
    "--fake-test-size",
    "32",
    "--quiet",
)


def make_job(
    name: str | Experiment,
    engine: str,
    *,
    nodes: int = 2,
    image: str | None = None,
    root: Path = ROOT,
    data_dir: Path = Path("/shared/data"),
    results_dir: Path = Path("/shared/results"),
    **kwargs,
):
    exp = name if isinstance(name, Experiment) else experiment(name)
    config = load_config(REPO_ROOT / "envkit.yaml")
    target = next(t for t in config.targets.values() if t.kind == exp.kind)
    options = kwargs.pop("options", dict())
    return build_job(
        engine,
        exp,
        target,
        nodes=nodes,
        root=root,
        data_dir=data_dir,
        results_dir=results_dir,
        image=image or f"{repository(target.name)}:latest",
        options=options,
        **kwargs,
    )


def record_push(project: Path, target: str, registry: str, tag: str = "latest") -> Path:
    """The record `envkit push TARGET --registry REGISTRY` leaves in the project (docker/<target>/pushed.json)."""
    return record(
        project / "docker" / target, target, [Pushed(f"{registry}/{repository(target)}", tag, DIGEST, IMAGE_ID)]
    )


def save_manifest(directory: Path, target: str) -> Path:
    """A tarball path and the manifest `envkit save` writes beside it (the tarball itself is not needed to launch)."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"{repository(target)}-0123456789ab"
    manifest = {
        "manifest_version": 1,
        "tag": f"{repository(target)}:0123456789ab",
        "image_id": IMAGE_ID,
        "tarball": f"{stem}.tar.gz",
        "sha256": "ab" * 32,
        "size": 1,
        "pins": {},
    }
    (directory / f"{stem}.manifest.json").write_text(json.dumps(manifest))
    return directory / f"{stem}.tar.gz"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


REGISTRY_IMAGE = f"registry.example:5000/team/envkit-cuda@{DIGEST}"


CUDA_TARBALL = "/shared/images/envkit-cuda-0123456789ab.tar.gz"


# --env in some cases of each engine (none in the others: no env, no change).
IFNAMES = ("NCCL_SOCKET_IFNAME=ib0", "GLOO_SOCKET_IFNAME=eth0")


# One representative experiment per engine (and per Slurm container), as `--dry-run` prints it.
CASES = {
    "hosts-gpu-ddp-cifar": lambda: (
        "hosts",
        make_job("gpu-ddp-cifar", "hosts", gpus_per_node=4, options=dict(hosts=("node1", "node2"))),
    ),
    "hosts-cpu-ddp-cifar": lambda: (
        "hosts",
        make_job("cpu-ddp-cifar", "hosts", nproc_per_node=2, env=IFNAMES[1:], options=dict(hosts=("node1", "node2"))),
    ),
    # Slurm's default: podman, here with the local image (no registry: a note says every node needs it).
    "slurm-podman-local-cpu-ddp-cifar": lambda: (
        "slurm",
        make_job("cpu-ddp-cifar", "slurm", nproc_per_node=2, env=("GLOO_SOCKET_IFNAME=eth0", "OMP_NUM_THREADS=1")),
    ),
    "slurm-podman-registry-cpu-ddp-cifar": lambda: (
        "slurm",
        make_job("cpu-ddp-cifar", "slurm", image=f"registry.example:5000/team/envkit-cpu@{DIGEST}", image_id=IMAGE_ID),
    ),
    "slurm-podman-tarball-gpu-ddp-cifar": lambda: (
        "slurm",
        make_job(
            "gpu-ddp-cifar",
            "slurm",
            gpus_per_node=4,
            env=IFNAMES,
            image="envkit-cuda:0123456789ab",
            image_id=IMAGE_ID,
            options=dict(image_tarball=CUDA_TARBALL),
        ),
    ),
    "slurm-host-cpu-ddp-cifar": lambda: (
        "slurm",
        make_job(
            "cpu-ddp-cifar",
            "slurm",
            nproc_per_node=2,
            env=("GLOO_SOCKET_IFNAME=eth0", "OMP_NUM_THREADS=1"),
            options=dict(container="host"),
        ),
    ),
    "slurm-host-gpu-ddp-cifar": lambda: (
        "slurm",
        make_job(
            "gpu-ddp-cifar",
            "slurm",
            gpus_per_node=4,
            options=dict(container="host", partition="gpu", time="02:00:00"),
        ),
    ),
    "slurm-docker-gpu-ddp-cifar": lambda: (
        "slurm",
        make_job("gpu-ddp-cifar", "slurm", gpus_per_node=4, env=IFNAMES, options=dict(container="docker")),
    ),
    "slurm-pyxis-gpu-ddp-cifar": lambda: (
        "slurm",
        make_job(
            "gpu-ddp-cifar",
            "slurm",
            gpus_per_node=4,
            image=REGISTRY_IMAGE,
            image_id=IMAGE_ID,
            options=dict(container="pyxis"),
        ),
    ),
    "slurm-apptainer-gpu-ddp-cifar": lambda: (
        "slurm",
        make_job(
            "gpu-ddp-cifar",
            "slurm",
            gpus_per_node=4,
            image="envkit-cuda:0123456789ab",
            image_id=IMAGE_ID,
            options=dict(container="apptainer", image_tarball=CUDA_TARBALL),
        ),
    ),
    "pytorchjob-gpu-ddp-cifar": lambda: (
        "pytorchjob",
        make_job("gpu-ddp-cifar", "pytorchjob", gpus_per_node=4, image=REGISTRY_IMAGE, image_id=IMAGE_ID, env=IFNAMES),
    ),
    "jobset-gpu-ddp-cifar": lambda: (
        "jobset",
        make_job("gpu-ddp-cifar", "jobset", gpus_per_node=4, image=REGISTRY_IMAGE, image_id=IMAGE_ID),
    ),
    "jobset-tpu-mnist": lambda: (
        "jobset",
        make_job(
            "tpu-mnist",
            "jobset",
            nodes=4,
            env=("XLA_FLAGS=--xla_dump_to=/tmp/x",),
            options=dict(tpu_accelerator="tpu-v5-lite-podslice", tpu_topology="4x4"),
        ),
    ),
    "tpu-pod-registry-tpu-mnist": lambda: (
        "tpu-pod",
        make_job(
            "tpu-mnist",
            "tpu-pod",
            nodes=4,
            image=f"registry.example:5000/team/envkit-tpu-vm@{DIGEST}",
            image_id=IMAGE_ID,
            options=dict(tpu="my-v4-32", zone="us-central2-b"),
        ),
    ),
    "tpu-pod-tarball-tpu-mnist": lambda: (
        "tpu-pod",
        make_job(
            "tpu-mnist",
            "tpu-pod",
            nodes=4,
            env=("XLA_FLAGS=--xla_dump_to=/tmp/x",),
            image="envkit-tpu-vm:0123456789ab",
            image_id=IMAGE_ID,
            options=dict(
                tpu="my-v4-32", zone="us-central2-b", image_tarball="/shared/images/envkit-tpu-vm-0123456789ab.tar.gz"
            ),
        ),
    ),
    "skypilot-gpu-ddp-cifar": lambda: (
        "skypilot",
        make_job("gpu-ddp-cifar", "skypilot", gpus_per_node=8, image=REGISTRY_IMAGE, image_id=IMAGE_ID, env=IFNAMES),
    ),
    "skypilot-tpu-mnist": lambda: (
        "skypilot",
        make_job("tpu-mnist", "skypilot", nodes=4, options=dict(accelerators="tpu-v5e-16")),
    ),
}


def fake_client(bin_dir: Path, name: str, exit_code: int = 0, message: str = "") -> Path:
    """A client that records its arguments (one per line, NUL-free) and answers like the real one."""
    bin_dir.mkdir(exist_ok=True)
    log = bin_dir / f"{name}.calls"
    script = bin_dir / name
    script.write_text(
        "#!/bin/bash\n"
        f'printf "%s\\0" "$@" >> {shlex.quote(str(log))}\nprintf "\\n" >> {shlex.quote(str(log))}\n'
        f"echo {shlex.quote(message)} >&2\nexit {exit_code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return log


def calls(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [entry.split("\0") for entry in log.read_text().split("\0\n") if entry]

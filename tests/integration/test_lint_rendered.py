"""Rendered files pass hadolint and shellcheck, and run.sh's dry run says exactly what it would run."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from linters import linter
from paths import GOLDEN

TARGETS = ["cpu", "cuda", "tpu-vm"]


def rendered(repo_root: Path, filename: str) -> list[Path]:
    # The committed files, and the golden fixture that exercises every template branch.
    return [repo_root / "docker" / t / filename for t in TARGETS] + sorted(GOLDEN.glob(f"*/{filename}"))


def test_hadolint_reports_nothing(repo_root):
    dockerfiles = list(rendered(repo_root, "Dockerfile"))
    assert dockerfiles, "no rendered Dockerfile"
    for dockerfile in dockerfiles:
        result = subprocess.run([linter("hadolint"), "--no-color", str(dockerfile)], capture_output=True, text=True)
        assert (result.returncode, result.stdout + result.stderr) == (0, ""), dockerfile


def test_shellcheck_reports_nothing(repo_root):
    scripts = [str(path) for path in rendered(repo_root, "run.sh")]
    result = subprocess.run([linter("shellcheck"), *scripts], capture_output=True, text=True)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def dry_run(repo_root: Path, target: str, *args: str, directory: Path = GOLDEN, **env: str):
    environment = {"PATH": os.environ["PATH"], "ENVKIT_DRY_RUN": "1", "DATA_DIR": "/srv/data", **env}
    script = (repo_root / "docker" if directory is None else directory) / target / "run.sh"
    return subprocess.run([str(script), *args], capture_output=True, text=True, env=environment, cwd="/tmp")


OWNER = f"{os.getuid()}:{os.getgid()}"
# run.sh's command: the seed recipe, from the project's root in the image.
MNIST = ("python", "recipes/mnist.py")
TAIL = ["python", "/opt/envkit/envkit_run.py", *MNIST]


def mounts(device: str, results: str = "/tmp/results", target: str | None = None) -> list[str]:
    """The run's locations, device and target (the record's row) as variables (nothing on the command), then its
    mounts. This repository's targets are named for their kinds."""
    locations = ["ENVKIT_DATA_DIR=/workspace/data", "ENVKIT_RESULTS_DIR=/workspace/results", f"ENVKIT_DEVICE={device}"]
    return [
        *(word for setting in locations for word in ("-e", setting)),
        "-e",
        f"ENVKIT_TARGET={target or device}",
        "-v",
        "/srv/data:/workspace/data",
        "-v",
        f"{results}:/workspace/results",
    ]


def test_cpu_dry_run(repo_root):
    result = dry_run(repo_root, "cpu", *MNIST, "--epochs", "1", directory=None)
    assert result.returncode == 0, result.stderr
    assert shlex.split(result.stdout) == [
        "docker", "run", "--rm", "--init", "--user", OWNER, "-e", "HOME=/tmp", "--shm-size", "2g",
        "-e", "ENVKIT_IMAGE=envkit-cpu:latest", "-e", "ENVKIT_IMAGE_ID", "-e", "ENVKIT_IMAGE_DIGEST", "-e", f"ENVKIT_RESULTS_OWNER={OWNER}", "-e", "ENVKIT_EXPERIMENT", "-e", "ENVKIT_METRIC_PATTERNS",
        *mounts("cpu"), "envkit-cpu:latest", *TAIL, "--epochs", "1",
    ]  # fmt: skip


def test_cuda_dry_run_renumbers_chosen_gpus(repo_root):
    result = dry_run(repo_root, "cuda", *MNIST, GPUS="0,2", IMAGE="lab/envkit-cuda:abc", directory=None)
    assert result.returncode == 0, result.stderr
    assert shlex.split(result.stdout) == [
        "docker", "run", "--rm", "--init", "--user", OWNER, "-e", "HOME=/tmp",
        "--gpus", '"device=0,2"', "-e", "CUDA_VISIBLE_DEVICES=0,1", "--ipc=host",
        "--ulimit", "memlock=-1", "--ulimit", "stack=67108864",
        "-e", "ENVKIT_IMAGE=lab/envkit-cuda:abc", "-e", "ENVKIT_IMAGE_ID", "-e", "ENVKIT_IMAGE_DIGEST", "-e", f"ENVKIT_RESULTS_OWNER={OWNER}", "-e", "ENVKIT_EXPERIMENT", "-e", "ENVKIT_METRIC_PATTERNS",
        *mounts("cuda"), "lab/envkit-cuda:abc", *TAIL,
    ]  # fmt: skip
    assert "--gpus '\"device=0,2\"'" in result.stdout, "the quoting a user would type"


def test_cuda_gpus_all_and_config_default(repo_root):
    everything = shlex.split(dry_run(repo_root, "cuda", *MNIST, GPUS="all", directory=None).stdout)
    assert everything[8:11] == ["--gpus", "all", "--ipc=host"]
    assert "CUDA_VISIBLE_DEVICES" not in " ".join(everything)
    default = shlex.split(dry_run(repo_root, "cuda", *MNIST).stdout)  # golden config: gpus [1, 3], shm 8g
    assert default[8:14] == ["--gpus", '"device=1,3"', "-e", "CUDA_VISIBLE_DEVICES=0,1", "--shm-size", "8g"]


@pytest.mark.parametrize("gpus", ["a", "0,", "-1", "0;reboot", "0 1", "1,b"])
def test_cuda_rejects_gpus_that_are_not_indices(repo_root, gpus):
    result = dry_run(repo_root, "cuda", *MNIST, GPUS=gpus, directory=None)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "GPUS must be 'all' or comma-separated GPU indices" in result.stderr


@pytest.mark.parametrize("gpus", ["0,0", "1,2,1", "3,12,3"])
def test_cuda_rejects_a_gpu_named_twice(repo_root, gpus):
    result = dry_run(repo_root, "cuda", *MNIST, GPUS=gpus, directory=None)
    assert result.returncode == 2 and result.stdout == "" and "twice; give each index once" in result.stderr


def test_cuda_accepts_indices_that_share_digits(repo_root):
    result = dry_run(repo_root, "cuda", *MNIST, GPUS="1,11,21", directory=None)
    assert result.returncode == 0 and "CUDA_VISIBLE_DEVICES=0,1,2" in result.stdout


def test_the_image_tells_any_command_its_device_and_adds_no_argument(repo_root):
    """Before: run.sh added --device, --data-dir and --results-dir to the recipe's arguments, which a user's own
    script rejects; now the device and the locations are variables, and the arguments are the caller's alone."""
    kinds = yaml.safe_load((repo_root / "envkit" / "data" / "kinds.yaml").read_text())["kinds"]
    assert TARGETS, "no target to run"
    for target in TARGETS:
        for recipe in ("cifar", "probe"):
            words = shlex.split(
                dry_run(
                    repo_root, target, "python", f"recipes/{recipe}.py", "--parallel", "dp", directory=None, GPUS="1,2"
                ).stdout
            )
            assert f"ENVKIT_DEVICE={kinds[target]['device']}" in words, target
            assert words[words.index(f"recipes/{recipe}.py") + 1 :] == ["--parallel", "dp"], target


def test_tpu_dry_run(repo_root):
    result = dry_run(repo_root, "tpu-vm", *MNIST, "--device", "tpu", directory=None, RESULTS_DIR="out")
    assert shlex.split(result.stdout) == [
        "docker", "run", "--rm", "--init", "--privileged", "--net=host", "--shm-size", "16G",
        "-e", "PJRT_DEVICE=TPU", "-e", "ENVKIT_IMAGE=envkit-tpu-vm:latest", "-e", "ENVKIT_IMAGE_ID",
        "-e", "ENVKIT_IMAGE_DIGEST", "-e", f"ENVKIT_RESULTS_OWNER={OWNER}", "-e", "ENVKIT_EXPERIMENT", "-e", "ENVKIT_METRIC_PATTERNS", *mounts("tpu", "/tmp/out", "tpu-vm"), "envkit-tpu-vm:latest",
        *TAIL, "--device", "tpu",
    ]  # fmt: skip


@pytest.mark.parametrize("target", TARGETS)
def test_odd_arguments_pass_through_as_single_words(repo_root, target):
    odd = ["--run-name", "a b;c", "it's", "$(id)", "", "*", 'quote"d', "back\\slash"]
    result = dry_run(repo_root, target, *MNIST, *odd, directory=None)
    assert result.returncode == 0, result.stderr
    assert shlex.split(result.stdout)[-len(odd) :] == odd
    assert result.stdout.rstrip("\n").endswith(shlex.join(odd)), "quoting matches shlex.quote exactly"


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ((), {}, "missing COMMAND"),
        (("",), {}, "missing COMMAND"),
        (MNIST, {"SHM_SIZE": "lots"}, "SHM_SIZE must be a size"),
    ],
)
def test_run_sh_bad_input(repo_root, args, env, message):
    result = dry_run(repo_root, "cpu", *args, directory=None, **env)
    assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1


def test_docker_client_may_be_several_words(repo_root):
    result = dry_run(repo_root, "cpu", *MNIST, DOCKER="sudo -E docker", directory=None)
    assert shlex.split(result.stdout)[:5] == ["sudo", "-E", "docker", "run", "--rm"]


def test_cuda_ulimits_are_defaults_a_user_may_replace(repo_root):
    def limits(**env):
        words = shlex.split(dry_run(repo_root, "cuda", *MNIST, directory=None, **env).stdout)
        return [words[i + 1] for i, word in enumerate(words) if word == "--ulimit"]

    assert limits() == ["memlock=-1", "stack=67108864"]
    assert limits(ULIMITS="") == []
    assert limits(ULIMITS="memlock=-1 nofile=1024:2048") == ["memlock=-1", "nofile=1024:2048"]
    bad = dry_run(repo_root, "cuda", *MNIST, ULIMITS="memlock=$(id)", directory=None)
    assert bad.returncode == 2 and bad.stdout == "" and "ULIMITS must be NAME=LIMIT words" in bad.stderr
    assert "--ulimit" not in dry_run(repo_root, "cpu", *MNIST, directory=None).stdout


MULTINODE = {
    "NNODES": "2",
    "NODE_RANK": "1",
    "RDZV_ENDPOINT": "node0:29500",
    "RDZV_ID": "job7",
    "NCCL_SOCKET_IFNAME": "eth0",
    "GLOO_SOCKET_IFNAME": "eth1",
}


@pytest.mark.parametrize("target", TARGETS)
def test_multi_node_settings_pass_through_by_name(repo_root, target):
    words = shlex.split(dry_run(repo_root, target, *MNIST, directory=None, **MULTINODE).stdout)
    passed = [words[i + 1] for i, word in enumerate(words) if word == "-e" and words[i + 1] in MULTINODE]
    assert passed == list(MULTINODE)
    assert words.count("--net=host") == 1, "NNODES > 1 needs the host network, once"
    one_host = shlex.split(dry_run(repo_root, target, *MNIST, directory=None, NNODES="1").stdout)
    assert one_host.count("--net=host") == (target == "tpu-vm") and "NNODES" in one_host


def test_multi_node_settings_only_when_set(repo_root):
    words = shlex.split(dry_run(repo_root, "cpu", *MNIST, directory=None, NODE_RANK="0").stdout)
    assert "NODE_RANK" in words and "NNODES" not in words and "--net=host" not in words


@pytest.mark.parametrize("nnodes", ["0", "two", "-1", "1;id"])
def test_bad_nnodes_is_one_line(repo_root, nnodes):
    result = dry_run(repo_root, "cpu", *MNIST, directory=None, NNODES=nnodes)
    assert result.returncode == 2 and result.stdout == "" and "NNODES must be a number of hosts" in result.stderr


def test_run_sh_passes_the_image_id_it_finds(repo_root, tmp_path):
    fake = tmp_path / "fake-docker"
    fake.write_text(
        '#!/bin/sh\nif [ "$1" = image ]; then echo sha256:abc; exit 0; fi\n'
        'printf "%s\\n" "$ENVKIT_IMAGE_ID" > "$0.id"\n'
    )
    fake.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"],
        "DOCKER": str(fake),
        "DATA_DIR": str(tmp_path / "d"),
        "RESULTS_DIR": str(tmp_path / "r"),
    }
    result = subprocess.run(
        [str(repo_root / "docker" / "cpu" / "run.sh"), *MNIST], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "fake-docker.id").read_text() == "sha256:abc\n"


DIGEST = "sha256:" + "d1" * 32


@pytest.mark.parametrize(
    "image, buildah_digest, caller, expected",
    [
        ("envkit-cpu:latest", DIGEST, None, DIGEST),  # buildah built it: its storage has the engine's image ID
        ("envkit-cpu:latest", None, None, ""),  # the Docker engine built it: no manifest digest to name
        (f"reg:5000/envkit-cpu@{DIGEST}", None, None, DIGEST),  # a reference by digest names it
        ("envkit-cpu:latest", DIGEST, "sha256:" + "ca" * 32, "sha256:" + "ca" * 32),  # the caller's (a registry's) wins
    ],
)
def test_run_sh_passes_the_image_digest_it_finds(repo_root, tmp_path, image, buildah_digest, caller, expected):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "fake-docker"
    fake.write_text(
        '#!/bin/sh\nif [ "$1" = image ]; then echo sha256:abc; exit 0; fi\n'
        'printf "%s\\n" "$ENVKIT_IMAGE_DIGEST" > "$0.digest"\n'
    )
    fake.chmod(0o755)
    if buildah_digest:  # answers only for the image ID the engine gave
        (bin_dir / "buildah").write_text(f'#!/bin/sh\n[ "$6" = sha256:abc ] && echo {buildah_digest}\n')
        (bin_dir / "buildah").chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "DOCKER": str(fake),
        "IMAGE": image,
        "DATA_DIR": str(tmp_path / "d"),
        "RESULTS_DIR": str(tmp_path / "r"),
        **({"ENVKIT_IMAGE_DIGEST": caller} if caller else {}),
    }
    result = subprocess.run(
        [str(repo_root / "docker" / "cpu" / "run.sh"), *MNIST], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert (bin_dir / "fake-docker.digest").read_text() == f"{expected}\n"


def test_run_sh_runs_the_docker_client_it_is_given(repo_root, tmp_path):
    fake = tmp_path / "fake-docker"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$0.args"\n')
    fake.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"],
        "DOCKER": str(fake),
        "DATA_DIR": str(tmp_path / "d"),
        "RESULTS_DIR": str(tmp_path / "r"),
    }
    script = repo_root / "docker" / "cpu" / "run.sh"
    result = subprocess.run([str(script), *MNIST, "--run-name", "a b"], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "d").is_dir() and (tmp_path / "r").is_dir(), "mount points made by the caller, not by dockerd"
    assert (tmp_path / "fake-docker.args").read_text().splitlines()[-2:] == ["--run-name", "a b"]

"""The real Docker engine for the slow tests: its client, the base image, a registry, and projects built on it.

Skips with the reason when the engine or a tool is missing, and fails instead when ENVKIT_REQUIRE_DOCKER=1."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import offline_lock
import pytest
from offline_lock import OfflineLockError, lock_and_render, new_project, torch_index
from paths import REPO_ROOT

from envkit.errors import EnvkitError
from envkit.image.build import docker_cli as docker_command
from envkit.image.build_context import staging_path
from envkit.project.load import load_config
from envkit.support.docker_client import connect_docker

OFFLINE_CONFIG = REPO_ROOT / "benchmarks" / "envkit-offline.yaml"


HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# run.sh's command for a five-step MNIST run on generated data: the engine tests' smallest real training.
MNIST_SMOKE = ("python", "recipes/mnist.py", "--device", "cpu", "--dataset", "fake", "--max-steps", "5", "--quiet")


def engine_test(test):
    return pytest.mark.slow(pytest.mark.docker(test))


def unavailable(reason: str):
    if os.environ.get("ENVKIT_REQUIRE_DOCKER", "") not in ("", "0"):
        pytest.fail(f"ENVKIT_REQUIRE_DOCKER=1 but {reason}")
    pytest.skip(reason)


def envkit(*args: str, cwd: Path, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "envkit", *args], cwd=cwd, capture_output=True, text=True, env=env)
    if check and done.returncode != 0:
        pytest.fail(f"envkit {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done


@pytest.fixture(scope="session")
def client():
    try:
        return connect_docker()
    except EnvkitError as exc:
        unavailable(str(exc))


@pytest.fixture(scope="session")
def docker_cli(client) -> str:
    return shlex.join(docker_command())


@pytest.fixture(scope="session")
def base_image(client, repo_root) -> str:
    done = subprocess.run([str(repo_root / "scripts" / "base-image.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        unavailable(f"scripts/base-image.sh could not make the base image: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout.strip()


def fill_wheelhouse(wheels: Path, config: Path, target: str) -> Path:
    """pip download what the target's Dockerfile installs into ``wheels``."""
    local = Path(os.environ.get("ENVKIT_TEST_WHEELS", "/opt/wheels"))
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest", str(wheels)]
    if local.is_dir():
        command += ["--find-links", str(local)]
    wanted = load_config(config).target(target).requirements()
    done = subprocess.run([*command, *wanted], capture_output=True, text=True)
    if done.returncode != 0:
        unavailable(f"cannot fill the wheelhouse with {' '.join(wanted)}: {done.stderr.strip().splitlines()[-1:]}")
    return wheels


@pytest.fixture(scope="session")
def project(tmp_path_factory) -> Path:
    root = new_project(tmp_path_factory.mktemp("project"), OFFLINE_CONFIG)
    envkit("render", "--all", "--config", "envkit.yaml", cwd=root)
    yield root
    shutil.rmtree(staging_path(root, "cpu"), ignore_errors=True)


@pytest.fixture
def registry(tmp_path):
    """Debian's docker-registry on a free local port (dockerd trusts 127.0.0.0/8 over plain http)."""
    with served_registry(tmp_path) as address:
        yield address


@contextlib.contextmanager
def served_registry(folder: Path):
    """docker-registry serving from ``folder`` on a free local port while the block runs: its address."""
    binary = shutil.which("docker-registry")
    if binary is None:
        unavailable("docker-registry is not installed (apt-get install docker-registry)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (folder / "registry.yml").write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {folder / 'store'}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    server = subprocess.Popen(
        [binary, "serve", str(folder / "registry.yml")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(50):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("docker-registry did not answer within 10 s")
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def manifest_digest(registry_address: str, repository: str, tag: str) -> str:
    """What the registry itself says the tag's manifest digest is."""
    request = urllib.request.Request(
        f"http://{registry_address}/v2/{repository}/manifests/{tag}",
        method="HEAD",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.headers["Docker-Content-Digest"]


def build_committed(target: str, base_image: str, repo_root: Path) -> str:
    """``envkit build TARGET`` of the checkout's files, as a user builds a committed target."""
    trust = ["--ca-cert", str(HOST_CA_BUNDLE)] if HOST_CA_BUNDLE.is_file() else []
    return envkit(
        "build", target, "--config", str(repo_root / "envkit.yaml"), "--base-image", base_image, *trust, cwd=repo_root
    ).stdout.strip()


def locked_build(
    project: Path, wheels: Path, base_image: str, check: bool = True, target: str = "cpu"
) -> subprocess.CompletedProcess:
    """``envkit build TARGET`` of a locked project, every wheel from its wheelhouse."""
    return envkit(
        "build",
        target,
        "--config",
        "envkit.yaml",
        "--base-image",
        base_image,
        "--wheelhouse",
        str(wheels),
        cwd=project,
        check=check,
    )


def locked_project(root: Path, config: Path = OFFLINE_CONFIG) -> tuple[Path, Path]:
    """The offline cpu config locked (torch from a local stand-in for PyTorch's index, the
    rest from the default index), rendered, and its wheelhouse filled from the lock."""
    try:
        project = new_project(root / "project", config)
        lock = lock_and_render(project, torch_index(root.parent / "torch-index"))
        return project, offline_lock.fill_wheelhouse(lock, root / "wheels")
    except OfflineLockError as exc:
        unavailable(f"cannot make the locked offline project: {exc}")


@pytest.fixture(scope="session")
def locked(tmp_path_factory, client) -> tuple[Path, Path]:
    project, wheels = locked_project(tmp_path_factory.mktemp("locked"))
    yield project, wheels
    shutil.rmtree(staging_path(project, "cpu"), ignore_errors=True)

"""The Docker client: a pinged Docker SDK client for the Docker daemon, or one line saying why not.

(In envkit, "engine" means a launch engine of envkit.launch; the Docker daemon is "Docker".)

Every command that talks to the engine (build, run, push, save, load, prune,
doctor) connects here, so "no engine", "no permission" and "no SDK" read the
same everywhere.
"""

from __future__ import annotations

import os

from envkit import DISTRIBUTION
from envkit.errors import EnvkitError

START_ENGINE_HINT = (
    "start one with 'sudo systemctl start docker' (or 'sudo dockerd &', or 'sudo scripts/docker-engine.sh start')"
)
PING_TIMEOUT_S = 15
SDK_MISSING = f"the Docker SDK for Python is missing: pip install '{DISTRIBUTION}[docker]' (or run 'make venv')"


def docker_sdk():
    """The ``docker`` package, or EnvkitError naming the extra that installs it."""
    try:
        import docker

        # Without the SDK, `python -m envkit` in a project root imports the rendered
        # docker/ directory as an empty namespace package instead of failing.
        docker.from_env  # noqa: B018 - the attribute access is the check
    except (ImportError, AttributeError):
        raise EnvkitError(SDK_MISSING) from None
    return docker


def _engine_error(exc: Exception) -> str:
    text = str(exc)
    if "Permission denied" in text:
        return (
            "permission denied on the Docker socket: add yourself to the 'docker' group (sudo usermod -aG "
            "docker $USER) and log in again"
        )
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    return f"no Docker engine answers at {where}: {START_ENGINE_HINT}"


def connect_docker():
    """A Docker SDK client whose engine answered a ping, or EnvkitError in one line."""
    docker = docker_sdk()
    try:
        # A hung engine should fail the ping quickly; saves, loads and pushes of
        # gigabyte images then get the long timeout.
        client = docker.from_env(timeout=PING_TIMEOUT_S)
        client.ping()
        client.api.timeout = int(os.environ.get("ENVKIT_DOCKER_TIMEOUT", "600"))
    except docker.errors.DockerException as exc:
        raise EnvkitError(_engine_error(exc)) from None
    return client

"""Target kinds (envkit/data/kinds.yaml) as frozen records.

config, render, doctor, the CLI and the plans ask these records instead of testing
kind names, so a new kind is data plus its run.sh fragment
(templates/kinds/<kind>.run.sh.j2), and no Python.
"""

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from envkit.errors import EnvkitError
from envkit.project.datafile import DATA_DIR, load_table

KINDS_PATH = DATA_DIR / "kinds.yaml"
# envkit's own table, checked against its schema by tests/project/test_kinds.py, not at every run (issue 42).
SCHEMA_PATH = DATA_DIR / "kinds.schema.json"
# A kind that names no platforms builds for x86-64 only, as every image did before kinds named them.
DEFAULT_PLATFORMS = ("linux/amd64",)


class HostCheck(NamedTuple):
    check: str  # "none" | "nvidia" | "devices"
    name: str | None = None  # how doctor labels the devices found
    globs: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    missing: str | None = None  # why a host without the device cannot run the kind
    module: str | None = None  # what the recipes import to run on this Python without an image


class RunSettings(NamedTuple):
    user: str  # "caller" | "root"
    shm_size: str | None  # None: share the host's IPC namespace
    docker_args: tuple[str, ...] = ()
    host_network: bool = False
    env: Mapping[str, str] = MappingProxyType({})
    ulimits: Mapping[str, str] = MappingProxyType({})


class Kind(NamedTuple):
    name: str
    summary: str
    wheels: str  # "cpu" | "cuda" | "torch_xla": the rule envkit/project/wheels.py applies
    base_image: str  # "python" | "distro"
    keys: tuple[str, ...]
    device: str  # ENVKIT_DEVICE for every run on this kind
    host: HostCheck
    run: RunSettings
    python_base_image: str  # format string with {python}, for base_image "python"
    platforms: tuple[str, ...] = DEFAULT_PLATFORMS  # docker's names: linux/amd64, linux/arm64
    # How envkit launch's engines ask a node for the devices (kinds.yaml's launch; read by envkit/launch/).
    launch: Mapping[str, Any] = MappingProxyType({"accelerator": "none"})


@cache
def load_kinds(path: Path = KINDS_PATH) -> dict[str, Kind]:
    """Name -> Kind, in the file's order; a malformed file is one line."""
    data = load_table(path)
    kinds = {}
    for name, entry in data["kinds"].items():
        host, run = entry["host"], entry["run"]
        kinds[name] = Kind(
            name=name,
            summary=entry["summary"],
            wheels=entry["wheels"],
            base_image=entry["base_image"],
            keys=tuple(entry["keys"]),
            device=entry["device"],
            host=HostCheck(**{**host, "globs": tuple(host.get("globs", ())), "ignore": tuple(host.get("ignore", ()))}),
            run=RunSettings(**{**run, "docker_args": tuple(run.get("docker_args", ()))}),
            python_base_image=data["python_base_image"],
            platforms=tuple(entry.get("platforms", DEFAULT_PLATFORMS)),
            launch=MappingProxyType(entry.get("launch", {"accelerator": "none"})),
        )
    return kinds


@cache
def gpu_indices(path: Path = KINDS_PATH) -> str:
    """What GPUS is besides 'all' (kinds.yaml's gpu_indices): an extended regular expression of GPU indices."""
    return load_table(path)["gpu_indices"]


def kind(name: str) -> Kind:
    kinds = load_kinds()
    if name not in kinds:
        raise EnvkitError(f"unknown target kind '{name}': choose from {', '.join(kinds)}")
    return kinds[name]


def names() -> list[str]:
    return list(load_kinds())

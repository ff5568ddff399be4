"""Host facts: what this machine offers, and which experiments it can therefore run.

`envkit doctor`, `envkit experiment`'s pre-build check and `envkit compare` all ask
these functions, so "can this host run gpu-dp-cifar?" has one answer everywhere.
Which device each kind needs is data (envkit/data/kinds.yaml, its `host` entry);
the experiments come from the project's table (envkit.yaml's experiments).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import socket
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.project import DEFAULT_CONFIG, kinds
from envkit.project.experiments import Experiment, by_kind
from envkit.project.kinds import HostCheck
from envkit.support.docker_client import connect_docker

# Below this the cuda image (several GB) and a dataset no longer fit comfortably.
LOW_DISK_GB = 10.0
# Identical image digests from the Docker engine need BuildKit >= 0.13 (SOURCE_DATE_EPOCH
# with rewrite-timestamp); the first engine that bundles it is Docker 26.0.
DIGEST_BUILDKIT = (0, 13)
DIGEST_ENGINE = (26, 0)


@dataclass
class Builder:
    """One of envkit's builders (envkit.image.BUILDERS) as this host has it."""

    name: str
    version: str | None  # None: not installed, or no engine answers
    identical_digests: bool  # whether two `envkit build --no-cache` of one context give one manifest digest here
    note: str  # how, or why not
    buildkit: str | None = None  # the Docker engine's BuildKit, where the engine reports it


@dataclass
class HostFacts:
    docker_version: str | None = None
    docker_error: str | None = None
    builders: list[Builder] = field(default_factory=list)
    nvidia_runtime: bool = False
    gpus: list[str] = field(default_factory=list)
    # The device files a kind's `host: {check: devices}` entry found, by its name ("tpu": [...]).
    devices: dict[str, list[str]] = field(default_factory=dict)
    free_disk_gb: float = 0.0
    cpu_count: int = 1
    # Multi-host torchrun's c10d rendezvous looks this host up by name (pytorch#150532).
    hostname: str = ""
    hostname_resolves: bool = True
    hostname_problem: str | None = None  # what failed and what to do, when it does not resolve


def nvidia_gpus() -> list[str]:
    """The GPUs nvidia-smi -L lists (none without nvidia-smi)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.startswith("GPU ")]


def device_files(check: HostCheck) -> list[str]:
    """The files a kind's globs find, each glob's sorted, without the ones it says to ignore."""
    return [path for pattern in check.globs for path in sorted(glob.glob(pattern)) if path not in check.ignore]


def _device_checks() -> list[HostCheck]:
    return [spec.host for spec in kinds.load_kinds().values() if spec.host.check == "devices"]


def hostname_problem(name: str) -> str | None:
    """Why c10d cannot find this host by ``name`` (its own name and getfqdn()'s), or None when both resolve."""
    for looked_up in dict.fromkeys((name, socket.getfqdn(name))):
        try:
            socket.getaddrinfo(looked_up, None)
        except OSError as exc:
            which = "does not resolve" if looked_up == name else f"resolves, its full name {looked_up} does not"
            return (
                f"{which}: {exc.strerror or exc}; multi-host torchrun's c10d rendezvous fails without it; add "
                f"'ADDRESS {name}' to /etc/hosts, ADDRESS being this host's address on the network the other "
                "hosts reach"
            )
    return None


def inspect_host() -> HostFacts:
    devices = {check.name: device_files(check) for check in _device_checks()}
    facts = HostFacts(gpus=nvidia_gpus(), devices=devices, cpu_count=os.cpu_count() or 1, hostname=socket.gethostname())
    facts.hostname_problem = hostname_problem(facts.hostname)
    facts.hostname_resolves = facts.hostname_problem is None
    disk_path = "."
    try:
        client = connect_docker()
        version = client.version()
        facts.docker_version = version.get("Version", "unknown")
        facts.builders.append(docker_builder(version))
        info = client.info()
        facts.nvidia_runtime = "nvidia" in (info.get("Runtimes") or {}) or bool(
            shutil.which("nvidia-container-runtime-hook") or shutil.which("nvidia-ctk")
        )
        if os.path.isdir(info.get("DockerRootDir", "")):
            disk_path = info["DockerRootDir"]  # images land there, not in the project
    except EnvkitError as exc:
        facts.docker_error = str(exc)
        facts.builders.append(Builder("docker", None, False, "no engine answers"))
    facts.builders.append(buildah_builder())
    facts.free_disk_gb = round(shutil.disk_usage(disk_path).free / 1e9, 1)
    return facts


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+", 1)[0])[:2])


def _buildkit(version: dict) -> str | None:
    for component in version.get("Components") or []:
        if str(component.get("Name", "")).lower() == "buildkit":
            return str(component.get("Version", "")).lstrip("v")
    return None


def engine_can_give_identical_digests(version: dict) -> bool:
    """From the engine's version: its BuildKit component where it lists one, else the engine release."""
    buildkit = _buildkit(version)
    if buildkit is not None:
        return _release(buildkit) >= DIGEST_BUILDKIT
    return _release(str(version.get("Version", ""))) >= DIGEST_ENGINE


def docker_builder(version: dict) -> Builder:
    """The Docker engine's builds: compared by content, never by digest.

    Its classic image store keeps no manifest digest, and envkit's docker builds do not
    ask BuildKit to rewrite timestamps, so even an engine that could (BuildKit >= 0.13)
    gives other digests on rebuild here; `envkit verify` compares packages and files.
    """
    if engine_can_give_identical_digests(version):
        why = "the engine's BuildKit could (>= 0.13, rewrite-timestamp), envkit's docker builds do not ask it to"
    else:
        why = "its BuildKit predates 0.13 (rewrite-timestamp, Docker 26+)"
    return Builder(
        "docker",
        version.get("Version", "unknown"),
        False,
        f"{why}; verify compares packages and files",
        buildkit=_buildkit(version),
    )


def buildah_builder() -> Builder:
    from envkit.image import buildah

    found = buildah.version()
    if found is None:
        return Builder("buildah", None, False, "not installed (apt-get install buildah)")
    if buildah.has_timestamp():
        return Builder(
            "buildah", found, True, "bud --timestamp from SOURCE_DATE_EPOCH; verify compares manifest digests"
        )
    return Builder("buildah", found, False, "this buildah's bud has no --timestamp: upgrade buildah")


def device_problem(facts: HostFacts, kind: str) -> str | None:
    """Why this host lacks ``kind``'s device, or None when it has it (the engine aside)."""
    check = kinds.kind(kind).host
    if check.check == "nvidia":
        if not facts.gpus:
            return check.missing
        if not facts.nvidia_runtime:
            return (
                "NVIDIA GPUs found but Docker cannot reach them: install nvidia-container-toolkit and "
                "restart the engine"
            )
    if check.check == "devices" and not facts.devices.get(check.name):
        return check.missing
    return None


def kind_problem(facts: HostFacts, kind: str) -> str | None:
    """Why this host cannot run images of ``kind``, or None when it can."""
    kinds.kind(kind)  # an unknown kind is bad input on any host
    return facts.docker_error or device_problem(facts, kind)


def _experiments(config: Path) -> list[Experiment]:
    """The project's experiments, cheap kinds first as kinds.yaml lists them; none outside a project."""
    return by_kind(kinds.names(), config) if config.is_file() else []


def runnable_experiments(facts: HostFacts, config: Path = DEFAULT_CONFIG) -> list[str]:
    """The experiments this host can run in their images: cheap kinds first, as kinds.yaml lists them."""
    return [entry.name for entry in _experiments(config) if kind_problem(facts, entry.kind) is None]


def parse_gpus(text: str, available: int | None = None) -> list[int] | None:
    """``GPUS`` as host indices (None for 'all'); checked against ``available`` when known."""
    if text == "all":
        return None
    if not re.fullmatch(kinds.gpu_indices(), text):
        raise EnvkitError(f"GPUS='{text}' is invalid: give comma-separated GPU indices (e.g. GPUS=0,1) or GPUS=all")
    indices = [int(p) for p in text.split(",")]
    if len(set(indices)) != len(indices):
        raise EnvkitError(f"GPUS='{text}' names a GPU twice: give each index once")
    if available is not None:
        missing = [i for i in indices if i >= available]
        if missing:
            raise EnvkitError(
                f"GPUS='{text}' names GPU {missing[0]}, but this host has {available} (indices 0-{available - 1})"
            )
    return indices


def require(facts: HostFacts, kind: str, gpus: str | None = None) -> None:
    """Raise the one-line reason when the host cannot run ``kind`` (before any build)."""
    if gpus is not None:
        parse_gpus(gpus)  # a malformed value is bad input on any host
    problem = kind_problem(facts, kind)
    if problem:
        raise EnvkitError(f"this host cannot run {kind} images: {problem}")
    if gpus is not None and kinds.kind(kind).host.check == "nvidia":
        parse_gpus(gpus, len(facts.gpus))


def row_problem(facts: HostFacts, kind: str) -> str | None:
    """Why a row of doctor's report cannot run here, said once per row: its own device first, since
    that is the reason on GPU and TPU rows; the engine, whose state the report states once above,
    only where the device is there."""
    problem = device_problem(facts, kind)
    if problem is None and facts.docker_error:
        problem = "needs the Docker engine (see 'docker engine' above)"
    return problem


# What a "yes" row rests on, and what doctor cannot know from this host: said under the rows and in --json, so a
# "yes" is not read as "the experiment will run" (issue 40 §18: every row said yes where no image could be built).
CHECKED = (
    "the container engine answers",
    "each target kind's devices (NVIDIA GPUs and their container runtime, TPU devices)",
)
NOT_CHECKED = (
    "that the base images and the package index can be reached: the first envkit build pulls them "
    "(make <experiment> DRY_RUN=1 prints each step)",
    "that a script runs on its target's device (a script that needs CUDA fails on cpu): "
    "envkit doctor --probe trains briefly on each device here",
)


def format_report(facts: HostFacts, config: Path = DEFAULT_CONFIG) -> str:
    lines = [
        f"docker engine   {facts.docker_version or 'none'}" + (f": {facts.docker_error}" if facts.docker_error else ""),
        *_builder_lines(facts.builders),
        f"nvidia runtime  {'yes' if facts.nvidia_runtime else 'no'}",
        f"gpus            {len(facts.gpus)}" + "".join(f"\n                  {g}" for g in facts.gpus),
        *(
            f"{check.name + ' devices':16}{', '.join(facts.devices.get(check.name, [])) or 'none'}"
            for check in _device_checks()
        ),
        f"cpus            {facts.cpu_count}",
        f"host name       {facts.hostname}  ({facts.hostname_problem or 'resolves'})",
        f"free disk       {facts.free_disk_gb:.1f} GB"
        + ("  (low: images and datasets need ~10 GB)" if facts.free_disk_gb < LOW_DISK_GB else ""),
        "",
        f"checked: {'; '.join(CHECKED)}",
        *(f"not checked: {line}" for line in NOT_CHECKED),
        "",
        "make targets on this host:",
    ]
    for entry in _experiments(config):
        problem = row_problem(facts, entry.kind)
        lines.append(f"  {'yes' if problem is None else 'no ':4}{entry.name:18}{'' if problem is None else problem}")
    return "\n".join(lines)


def _builder_lines(builders: list[Builder]) -> list[str]:
    """One line per builder: its version, and whether a rebuild gives the same image digest."""
    lines = []
    for builder in builders:
        if builder.version is None:
            state = f"{builder.name}: {builder.note}"
        else:
            buildkit = f" (BuildKit {builder.buildkit})" if builder.buildkit else ""
            verdict = "yes" if builder.identical_digests else "no"
            state = f"{builder.name} {builder.version}{buildkit}: identical digests {verdict}: {builder.note}"
        lines.append(f"{'builders' if not lines else '':16}{state}")
    return lines


def as_json(facts: HostFacts, config: Path = DEFAULT_CONFIG) -> dict:
    """doctor --json: the facts, each kind's device files as <name>_devices (e.g. tpu_devices)."""
    record = asdict(facts)
    for name, files in record.pop("devices").items():
        record[f"{name}_devices"] = files
    return {
        **record,
        "runnable": runnable_experiments(facts, config),
        "checked": list(CHECKED),
        "not_checked": list(NOT_CHECKED),
    }

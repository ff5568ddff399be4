"""Host facts: what this machine offers, and which experiments it can therefore run.

`envkit doctor`, the Makefile's pre-build check and `envkit compare` all ask these
functions, so "can this host run gpu-dp-cifar?" has one answer everywhere.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass, field

from envkit.engine import connect_engine
from envkit.errors import EnvkitError

# make experiment target -> the image kind it runs in
EXPERIMENTS = {
    "cpu-mnist": "cpu",
    "gpu-mnist": "cuda",
    "gpu-single-cifar": "cuda",
    "gpu-dp-cifar": "cuda",
    "gpu-ddp-cifar": "cuda",
    "tpu-mnist": "tpu-vm",
    "tpu-mnist-single": "tpu-vm",
}
KINDS = ("cpu", "cuda", "tpu-vm")
# Below this the cuda image (several GB) and a dataset no longer fit comfortably.
LOW_DISK_GB = 10.0


@dataclass
class HostFacts:
    docker_version: str | None = None
    docker_error: str | None = None
    nvidia_runtime: bool = False
    gpus: list[str] = field(default_factory=list)
    tpu_devices: list[str] = field(default_factory=list)
    free_disk_gb: float = 0.0
    cpu_count: int = 1


def _nvidia_gpus() -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.startswith("GPU ")]


def _tpu_devices() -> list[str]:
    # /dev/vfio/vfio is the VFIO control node present on any VFIO host, not a TPU chip.
    vfio = [p for p in glob.glob("/dev/vfio/*") if os.path.basename(p) != "vfio"]
    return sorted(glob.glob("/dev/accel*")) + sorted(vfio)


def inspect_host() -> HostFacts:
    facts = HostFacts(gpus=_nvidia_gpus(), tpu_devices=_tpu_devices(), cpu_count=os.cpu_count() or 1)
    disk_path = "."
    try:
        client = connect_engine()
        facts.docker_version = client.version().get("Version", "unknown")
        info = client.info()
        facts.nvidia_runtime = "nvidia" in (info.get("Runtimes") or {}) or bool(shutil.which("nvidia-container-runtime-hook") or shutil.which("nvidia-ctk"))
        if os.path.isdir(info.get("DockerRootDir", "")):
            disk_path = info["DockerRootDir"]  # images land there, not in the project
    except EnvkitError as exc:
        facts.docker_error = str(exc)
    facts.free_disk_gb = round(shutil.disk_usage(disk_path).free / 1e9, 1)
    return facts


def kind_problem(facts: HostFacts, kind: str) -> str | None:
    """Why this host cannot run images of ``kind``, or None when it can."""
    if kind not in KINDS:
        raise EnvkitError(f"unknown target kind '{kind}': choose from {', '.join(KINDS)}")
    if facts.docker_error:
        return facts.docker_error
    if kind == "cuda":
        if not facts.gpus:
            return "no NVIDIA GPU found (nvidia-smi -L lists none): gpu-* targets need a GPU host; try cpu-mnist"
        if not facts.nvidia_runtime:
            return "NVIDIA GPUs found but Docker cannot reach them: install nvidia-container-toolkit and restart the engine"
    if kind == "tpu-vm" and not facts.tpu_devices:
        return "no TPU devices (/dev/accel*, /dev/vfio/*) found: tpu-* targets run on a Cloud TPU VM; try cpu-mnist"
    return None


def runnable_experiments(facts: HostFacts) -> list[str]:
    return [name for name, kind in EXPERIMENTS.items() if kind_problem(facts, kind) is None]


def parse_gpus(text: str, available: int | None = None) -> list[int] | None:
    """``GPUS`` as host indices (None for 'all'); checked against ``available`` when known."""
    if text == "all":
        return None
    parts = text.split(",")
    if not text or not all(p.isdigit() for p in parts):
        raise EnvkitError(f"GPUS='{text}' is invalid: give comma-separated GPU indices (e.g. GPUS=0,1) or GPUS=all")
    indices = [int(p) for p in parts]
    if len(set(indices)) != len(indices):
        raise EnvkitError(f"GPUS='{text}' names a GPU twice: give each index once")
    if available is not None:
        missing = [i for i in indices if i >= available]
        if missing:
            raise EnvkitError(f"GPUS='{text}' names GPU {missing[0]}, but this host has {available} (indices 0-{available - 1})")
    return indices


def require(facts: HostFacts, kind: str, gpus: str | None = None) -> None:
    """Raise the one-line reason when the host cannot run ``kind`` (before any build)."""
    if gpus is not None:
        parse_gpus(gpus)  # a malformed value is bad input on any host
    problem = kind_problem(facts, kind)
    if problem:
        raise EnvkitError(f"this host cannot run {kind} images: {problem}")
    if gpus is not None and kind == "cuda":
        parse_gpus(gpus, len(facts.gpus))


def format_report(facts: HostFacts) -> str:
    lines = [
        f"docker engine   {facts.docker_version or 'none'}" + (f"  ({facts.docker_error})" if facts.docker_error else ""),
        f"nvidia runtime  {'yes' if facts.nvidia_runtime else 'no'}",
        f"gpus            {len(facts.gpus)}" + "".join(f"\n                  {g}" for g in facts.gpus),
        f"tpu devices     {', '.join(facts.tpu_devices) or 'none'}",
        f"cpus            {facts.cpu_count}",
        f"free disk       {facts.free_disk_gb:.1f} GB" + ("  (low: images and datasets need ~10 GB)" if facts.free_disk_gb < LOW_DISK_GB else ""),
        "",
        "make targets on this host:",
    ]
    for name, kind in EXPERIMENTS.items():
        problem = kind_problem(facts, kind)
        lines.append(f"  {'yes' if problem is None else 'no ':4}{name:18}{'' if problem is None else problem}")
    return "\n".join(lines)

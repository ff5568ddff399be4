"""envkit's notebook helper: the runtime check (``check_runtime``), the accelerator this runtime has (TPU chips on
the PCI bus, NVIDIA GPUs by nvidia-smi) against the one the notebook needs, and the runtime's own Python and
packages, recorded. Standard library only, shipped beside the helper (envkit/notebook/runtime.py).
"""

from __future__ import annotations

import collections
import os
import platform
import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

try:  # in envkit: a module of envkit.notebook
    from .runtime_shared import NotebookStop, cpu_mode
except ImportError:  # in a notebook: beside envkit_notebook.py, which put its folder on sys.path
    from runtime_shared import NotebookStop, cpu_mode

PCI_DEVICES = Path("/sys/bus/pci/devices")
RUNTIME_PACKAGES = ("torch", "torch_xla", "libtpu")


def find_tpus(chips: dict, pci_devices: Path = PCI_DEVICES) -> dict[str, int]:
    """TPU chips on the PCI bus by name (v5e: 8), read from sysfs: no TPU runtime starts."""
    found: collections.Counter = collections.Counter()
    for device in sorted(pci_devices.glob("*")):
        try:
            if (device / "vendor").read_text().strip() != chips["vendor"]:
                continue
            device_id = (device / "device").read_text().strip()
            subsystem = (
                (device / "subsystem_device").read_text().strip() if (device / "subsystem_device").exists() else ""
            )
        except OSError:
            continue
        entry = chips["devices"].get(f"{device_id}:{subsystem}") or chips["devices"].get(device_id)
        if entry:
            found[entry["chip"]] += 1
    return dict(found)


def find_gpus(nvidia_smi: str = "nvidia-smi") -> list[str]:
    """The NVIDIA GPUs' names, from nvidia-smi (none when it is missing or fails)."""
    if shutil.which(nvidia_smi) is None:
        return []
    try:
        done = subprocess.run(
            [nvidia_smi, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


def describe_found(tpus: dict[str, int], gpus: list[str]) -> str:
    parts = [f"TPU {chip} ×{count}" for chip, count in sorted(tpus.items())]
    parts += [f"{name} ×{count}" for name, count in sorted(collections.Counter(gpus).items())]
    return ", ".join(parts) or "no accelerator (CPU only)"


def accelerator_problem(settings: dict, tpus: dict[str, int], gpus: list[str]) -> str | None:
    """Why this runtime is not the notebook's accelerator, as one line with the fix; None when it is."""
    device = settings["device"]
    if "tpu" in device:
        fits = tpus == {device["tpu"]: device["chips"]}
    else:
        # A whole word of the name: an L4 is not an L40S.
        model = re.compile(rf"(?<![A-Za-z0-9]){re.escape(device['gpu'])}(?![A-Za-z0-9])", re.IGNORECASE)
        fits = sum(bool(model.search(name)) for name in gpus) >= device["count"]
    if fits:
        return None
    return (
        f"this runtime has {describe_found(tpus, gpus)}, but this notebook runs on {settings['platform_title']}'s "
        f"{settings['label']}: {settings['select']}"
    )


def installed_version(distribution: str) -> str | None:
    """A distribution's version in this kernel, looked up without importing it."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def check_runtime(settings: dict, pci_devices: Path = PCI_DEVICES, nvidia_smi: str = "nvidia-smi") -> dict:
    """Refuse the wrong accelerator (one line with the fix); record the runtime as found."""
    tpus, gpus = find_tpus(settings["tpu_chips"], pci_devices), find_gpus(nvidia_smi)
    found = describe_found(tpus, gpus)
    cpu = cpu_mode() is not None
    if not cpu:
        problem = accelerator_problem(settings, tpus, gpus)
        if problem:
            raise NotebookStop(problem)
    runtime = {
        "found": found,
        "python": platform.python_version(),
        "version": {name: os.environ.get(name) for name in settings["runtime_version_env"]},
        "packages": {name: installed_version(name) for name in RUNTIME_PACKAGES},
    }
    expected = f"{settings['platform_title']}'s {settings['label']}"
    print(f"accelerator: {found}" + (f" (CPU mode: {expected} is not checked)" if cpu else f", as {expected} needs"))
    print(f"python: {runtime['python']}")
    print("preinstalled: " + ", ".join(f"{name} {version or 'none'}" for name, version in runtime["packages"].items()))
    print("runtime version: " + (", ".join(f"{k}={v}" for k, v in runtime["version"].items() if v) or "not shown"))
    known = settings["runtime_known"]
    drift = [
        f"{name} {known[name]} -> {runtime['packages'].get(name) or 'none'}"
        for name in RUNTIME_PACKAGES
        if name in known and known[name] != runtime["packages"].get(name)
    ]
    if not cpu:
        print(
            f"envkit's data ({known['source']}): "
            + ("; ".join(drift) + ": the runtime changed" if drift else "the same packages")
        )
    return runtime

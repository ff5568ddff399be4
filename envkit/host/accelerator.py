"""An experiment run on this host's own interpreter (`envkit experiment --python`) gets the accelerator its kind
promises, or is refused before it starts (issue 32 §3): a GPU or TPU experiment on a host without one would train
on the CPU under a GPU's or TPU's name. ``--allow-cpu`` runs it anyway as a CPU stand-in, and the run wrapper's
record then says CPU (the device it observed, envkit/support/provenance.py)."""

from __future__ import annotations

import os

from envkit.errors import EnvkitError
from envkit.project import kinds

ALLOW_CPU = "--allow-cpu"
# torch_xla's own way to say "XLA on the CPU" (E3 on XLA:CPU): a CPU stand-in asked for by name.
XLA_ON_CPU = ("PJRT_DEVICE", "CPU")


def require_accelerator(name: str, kind: str, allow_cpu: bool) -> bool:
    """Whether ``name`` runs here as a CPU stand-in (``kind`` needs a device this host lacks, and ``allow_cpu``
    asked for one); one line (exit 2) when it lacks the device and no stand-in was asked for."""
    problem = missing_device(kind)
    if problem and not allow_cpu:
        raise EnvkitError(
            f"{name} is a {kind} experiment and this host cannot give it its device: {problem}; "
            f"{ALLOW_CPU} runs it here on the CPU as a stand-in, recorded as a CPU run"
        )
    return problem is not None


def missing_device(kind: str) -> str | None:
    """What this host lacks of the device ``kind`` needs, or None: it has it, ``kind`` needs none, or torch_xla is
    asked to run on the CPU."""
    check = kinds.kind(kind).host
    if check.check == "none" or os.environ.get(XLA_ON_CPU[0]) == XLA_ON_CPU[1]:
        return None
    from envkit.host import doctor  # 50 ms of imports a CPU experiment's run need not wait for (issue 42)

    facts = doctor.HostFacts(nvidia_runtime=True)  # no image here: the engine's runtime does not matter
    if check.check == "nvidia":
        facts.gpus = doctor.nvidia_gpus()
    else:
        facts.devices = {check.name: doctor.device_files(check)}
    return doctor.device_problem(facts, kind) or None

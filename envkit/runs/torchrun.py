"""How a ``scale: torchrun`` experiment's script starts, in one place for every way envkit runs it on one host: a
host run and run.sh (envkit experiment, make, envkit demo) and a notebook's run cell. The launch engines start one
torchrun per node themselves (envkit.launch), with the node counts they are given.
"""

from __future__ import annotations

import os

from envkit.project import kinds
from envkit.project.experiments import PYTHONS, Experiment

# Two gloo processes: the smallest DDP that shows the lesson, and all a 2-core laptop has.
CPU_DDP_PROCESSES = 2


def started_program(entry: Experiment, gpus: int | None = None, *, device: str | None = None) -> tuple[str, ...]:
    """``entry``'s program as a host, run.sh (envkit experiment, make, demo) and a notebook start it: a ``scale:
    torchrun`` command's ``python SCRIPT`` under torchrun with _torchrun_processes per host and a single-host
    rendezvous on loopback. Unchanged for another scale, a recipe (which starts torchrun itself), or a command that
    is not a Python's script (``python -m ...``, a shell script). ``device`` is the device it runs on where that
    is not its kind's: "cpu" for a CPU stand-in (--allow-cpu on a host without the kind's device)."""
    program = entry.program
    if entry.scale != "torchrun" or entry.command is None or program[0] not in PYTHONS or program[1:2] == ("-m",):
        return program
    processes = _torchrun_processes(entry, gpus, device or kinds.kind(entry.kind).device)
    # --local-addr: the store's address is this host's name otherwise, and where that name does not resolve (no
    # 127.0.1.1 line in /etc/hosts) torchrun waits out its rendezvous timeouts, then fails (issue 33 §20).
    rendezvous = ("--standalone", "--local-addr", "127.0.0.1")
    return (program[0], "-m", "torch.distributed.run", *rendezvous, "--nproc-per-node", processes, *program[1:])


def _torchrun_processes(entry: Experiment, gpus: int | None, device: str) -> str:
    """torchrun's processes per host for a ``scale: torchrun`` experiment on its kind: one per GPU (``gpus`` where
    the platform says how many, else torchrun's ``gpu``: every GPU the run sees, those GPUS/run.sh give it),
    CPU_DDP_PROCESSES gloo processes on a CPU, one on a TPU: only one process may open a TPU chip and PJRT's
    runtime (kinds.yaml's PJRT_DEVICE=TPU) opens every chip of the host in the first, so N workers would fight over
    them; that one process spreads itself over the chips (torch_xla.launch), as on a TPU VM host. A GPU
    experiment's CPU stand-in is a CPU's: torchrun's ``gpu`` fails where CUDA is not ("Cuda is not available")."""
    if device == "cpu":
        return str(CPU_DDP_PROCESSES)
    if entry.gpus != "none":
        return "gpu" if gpus is None else str(gpus)
    return "1"


def cpu_threads(entry: Experiment, device: str | None = None) -> dict[str, str]:
    """OMP_NUM_THREADS for a command run on a CPU here: one thread budget (the CPUs this process may use) shared
    by its processes, so one process and torchrun's CPU_DDP_PROCESSES compare at the same threads in total
    (torchrun alone gives each of its processes one thread, one process takes every core: issue 32). Nothing for
    a recipe (its harness shares the budget itself), another device, or a command that starts torchrun itself.
    ``device``: as started_program's (a CPU stand-in shares the budget as a CPU run does)."""
    if entry.recipe is not None or (device or kinds.kind(entry.kind).device) != "cpu":
        return {}
    under_torchrun = started_program(entry, device="cpu") != entry.program
    if entry.scale == "torchrun" and not under_torchrun:
        return {}  # its processes are the command's own: their count is not known here
    processes = CPU_DDP_PROCESSES if under_torchrun else 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return {"OMP_NUM_THREADS": str(max(1, cpus // processes))}

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


def started_program(entry: Experiment, gpus: int | None = None) -> tuple[str, ...]:
    """``entry``'s program as a host, run.sh (envkit experiment, make, demo) and a notebook start it: a ``scale:
    torchrun`` command's ``python SCRIPT`` under torchrun with _torchrun_processes per host and a single-host
    rendezvous on loopback. Unchanged for another scale, a recipe (which starts torchrun itself), or a command that
    is not a Python's script (``python -m ...``, a shell script)."""
    program = entry.program
    if entry.scale != "torchrun" or entry.command is None or program[0] not in PYTHONS or program[1:2] == ("-m",):
        return program
    processes = _torchrun_processes(entry, gpus)
    # --local-addr: the store's address is this host's name otherwise, and where that name does not resolve (no
    # 127.0.1.1 line in /etc/hosts) torchrun waits out its rendezvous timeouts, then fails (issue 33 §20).
    rendezvous = ("--standalone", "--local-addr", "127.0.0.1")
    return (program[0], "-m", "torch.distributed.run", *rendezvous, "--nproc-per-node", processes, *program[1:])


def _torchrun_processes(entry: Experiment, gpus: int | None) -> str:
    """torchrun's processes per host for a ``scale: torchrun`` experiment on its kind: one per GPU (``gpus`` where
    the platform says how many, else torchrun's ``gpu``: every GPU the run sees, those GPUS/run.sh give it),
    CPU_DDP_PROCESSES gloo processes on a CPU, one on a TPU: only one process may open a TPU chip and PJRT's
    runtime (kinds.yaml's PJRT_DEVICE=TPU) opens every chip of the host in the first, so N workers would fight over
    them; that one process spreads itself over the chips (torch_xla.launch), as on a TPU VM host."""
    device = kinds.kind(entry.kind).device
    if entry.gpus != "none":
        return "gpu" if gpus is None else str(gpus)
    return str(CPU_DDP_PROCESSES) if device == "cpu" else "1"


def cpu_threads(entry: Experiment) -> dict[str, str]:
    """OMP_NUM_THREADS for a command run on a CPU here: one thread budget (the CPUs this process may use) shared
    by its processes, so one process and torchrun's CPU_DDP_PROCESSES compare at the same threads in total
    (torchrun alone gives each of its processes one thread, one process takes every core: issue 32). Nothing for
    a recipe (its harness shares the budget itself), another device, or a command that starts torchrun itself."""
    if entry.recipe is not None or kinds.kind(entry.kind).device != "cpu":
        return {}
    under_torchrun = started_program(entry) != entry.program
    if entry.scale == "torchrun" and not under_torchrun:
        return {}  # its processes are the command's own: their count is not known here
    processes = CPU_DDP_PROCESSES if under_torchrun else 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return {"OMP_NUM_THREADS": str(max(1, cpus // processes))}

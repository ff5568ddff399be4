"""Devices (cpu, cuda, and the TPU through torch_xla or TorchTPU) and the replicas a run trains on.

One vocabulary for data parallelism (:class:`Replicas`): *replicas* are the copies of
the model the global batch is split over (the results' ``world_size``); *processes*
are what torch.distributed counts (``rank`` of ``world_size``), each loading its own
shard of the data. They differ where one process feeds several replicas
(DataParallel, SPMD).
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .arguments import DEVICES
from .errors import RecipeError


def select_device(kind: str) -> torch.device:
    """The torch device for ``--device kind``; RecipeError when that hardware or software is
    missing."""
    if kind == "cpu":
        return torch.device("cpu")
    if kind == "cuda":
        if not torch.cuda.is_available():
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            hint = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
            raise RecipeError(
                f"--device cuda: no CUDA GPU is visible to torch {torch.__version__}{hint}; use "
                "--device cpu, or run in the cuda image with GPUs passed in"
            )
        return torch.device("cuda")
    if kind == "tpu":
        xla = import_torch_xla()
        return xla.device()
    raise RecipeError(f"--device {kind!r} is not known; choose one of {', '.join(DEVICES)}")


# GPU ids as envkit's kinds.yaml writes them (gpu_indices): a copy, since the recipes never
# import envkit (tests/recipes/test_harness.py compares the two).
GPU_INDICES = "[0-9]+(,[0-9]+)*"


def choose_gpus(text: str) -> None:
    """``--gpus 1,2,3,4``: CUDA_VISIBLE_DEVICES, set before anything initialises CUDA (torch does so
    lazily), so device 0 is the first GPU listed; RecipeError for anything but distinct GPU ids."""
    parts = [part.strip() for part in text.split(",")]
    if not re.fullmatch(GPU_INDICES, ",".join(parts)):
        raise RecipeError(
            f"--gpus {text!r} is not a comma-separated list of GPU ids; use integers such as "
            "0,1,2,3"
        )
    if len(set(map(int, parts))) != len(parts):
        raise RecipeError(f"--gpus {text!r} names a GPU twice; list each GPU id once")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(int(part)) for part in parts)


def import_torch_xla():
    """Import torch_xla, or RecipeError saying which image has it."""
    try:
        import torch_xla  # only the tpu image has it
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "torch_xla":
            raise RecipeError(
                "--device tpu needs torch_xla, which is not installed here; use the tpu-vm image "
                "(or PJRT_DEVICE=CPU with torch_xla installed for a CPU dry run)"
            ) from None
        # Installed but broken (a missing shared library, a torch of another release):
        # "not installed" would send the user looking in the wrong place.
        reason = " ".join(str(exc).split())
        raise RecipeError(
            f"--device tpu: torch_xla is installed but does not import ({reason}); it needs torch "
            "of the same release and the shared libpython, as the tpu-vm image provides"
        ) from None
    return torch_xla


def is_xla(device: torch.device) -> bool:
    return device.type == "xla"


def synchronize(device: torch.device) -> None:
    """Wait until the work queued on ``device`` has finished, so a clock reading means something.

    CUDA launches kernels asynchronously and XLA builds a lazy graph that runs on
    ``sync``; without this a timer measures only how fast the host queues work.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "tpu":  # TorchTPU
        torch.accelerator.synchronize()
    elif is_xla(device):
        import torch_xla
        import torch_xla.core.xla_model as xm

        torch_xla.sync()
        xm.wait_device_ops()


def seed_everything(seed: int, device: torch.device | None = None) -> None:
    """Seed Python's ``random``, torch (CPU and CUDA) and, on XLA, the device RNG."""
    random.seed(seed)
    torch.manual_seed(seed)
    if device is not None and is_xla(device):
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(seed, device=device)


def after_step(
    device: torch.device, callback: Callable[[torch.Tensor], None], tensor: torch.Tensor
) -> None:
    """Run ``callback(tensor)`` once the step's value exists: on XLA when the step's graph has run
    (reading it earlier would run the graph an extra time), elsewhere at once."""
    if is_xla(device):
        import torch_xla.core.xla_model as xm

        xm.add_step_closure(callback, args=(tensor,))
    else:
        callback(tensor)


def xla_compilations() -> int:
    """How many graphs torch_xla has compiled in this process so far (a steady epoch adds none)."""
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


@dataclass
class Replicas:
    """How this process takes part in data-parallel training.

    ``replicas``: copies of the model the global batch is split over (the results'
    ``world_size``). ``rank`` of ``world_size``: this process among the processes
    that each load their own shard of the data (torch.distributed's words); one
    process that feeds several replicas (DataParallel, SPMD) is rank 0 of 1.
    ``nodes``: hosts those processes run on.
    """

    device: torch.device
    rank: int = 0
    world_size: int = 1
    replicas: int | None = None  # default: one per process
    local_rank: int = 0  # this process among those on its host (its GPU on cuda)
    nodes: int = 1

    def __post_init__(self):
        if self.replicas is None:
            self.replicas = self.world_size

    @property
    def is_main(self) -> bool:
        """Rank 0 alone prints, checkpoints and writes results."""
        return self.rank == 0

    @property
    def processes_per_node(self) -> int:
        return self.world_size // self.nodes

    def sum_over_processes(self, values: list[float]) -> list[float]:
        """Element-wise sum of ``values`` over every process (one collective); unchanged in one
        process."""
        if self.world_size == 1:
            return values
        if is_xla(self.device):
            import torch_xla.core.xla_model as xm

            return xm.mesh_reduce(
                "sum_over_processes", values, lambda all_: [sum(column) for column in zip(*all_)]
            )
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return tensor.tolist()


# The threads a run's program may use on its host, where the user (or envkit) gives a number:
# the budget its processes share. torchrun sets it to 1 for each process it starts unless it is
# set; a recipe that starts torchrun itself sets it to the budget first (ddp.torchrun_env).
THREADS_VARIABLE = "OMP_NUM_THREADS"


def thread_budget() -> tuple[int, str]:
    """The threads this run may use on its host and where that number came from:
    OMP_NUM_THREADS where it is a positive whole number (the budget the run was given), else the
    CPUs this process may run on."""
    given = os.environ.get(THREADS_VARIABLE, "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given), THREADS_VARIABLE
    cpus = (
        os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    )
    return len(cpus), "cpus"


def share_threads(replicas: Replicas) -> dict:
    """On a CPU, gives this process its share of the run's thread budget (thread_budget), so
    that one process and N DDP processes use the same threads in total: torchrun gives each of
    its processes OMP_NUM_THREADS=1 while one process takes every core, and a speed-up would
    then measure thread counts, not processes (issue 32: DDP×2 read 6.27× over one process on
    two cores). Elsewhere the threads stay as they are. Returns what the record keeps: the
    budget and where it came from, this host's processes and the threads each used."""
    budget, source = thread_budget()
    processes = replicas.processes_per_node
    if replicas.device.type == "cpu":
        torch.set_num_threads(max(1, budget // processes))
    return {
        "budget": budget,
        "budget_from": source,
        "processes": processes,
        "per_process": torch.get_num_threads(),
    }

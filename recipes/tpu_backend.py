"""Which library gives PyTorch its TPU device here, and TorchTPU's own device and data-parallel
path.

Two TPU backends (docs/torchtpu.md):

- torch_xla (PyTorch/XLA, frozen at torch 2.9): the API of the published E1 comparison, whose three
  strategies mnist.py shows side by side;
- torch_tpu (TorchTPU, ``torch-tpu``, torch 2.11-2.15): ``import torch_tpu`` gives PyTorch a native
  ``tpu`` device; every device trains through DDP over its ``tpu_dist`` process group, one process
  per
  device started by torchrun after ``set_tpu_launch_env``.

An image installs one of them. Where both are installed, ``auto`` picks torch_xla, E1's API;
``--tpu-backend torch_tpu`` picks the other.

Import this module before torch (mnist.py does): ``import torch`` loads TorchTPU wherever it is
installed (a ``torch.backends`` entry point), and on a host without a TPU chip its libtpu would log
its start-up and, at the first ``backward()`` on any device, retry the cloud metadata server for
minutes.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

BACKENDS = ("torch_xla", "torch_tpu")  # in the order auto prefers them
# mnist.py's strategies that train on every device, per backend (both also train on one: "single").
EVERY_DEVICE = {"torch_xla": ("xmp", "spmd"), "torch_tpu": ("ddp",)}
# TPU chips show up on the PCI bus with Google's vendor id: how TorchTPU finds them, and reading it
# starts no TPU runtime.
PCI_DEVICES = Path("/sys/bus/pci/devices")
GOOGLE_PCI_VENDOR = "0x1ae0"


def has_tpu_chip(pci_devices: Path = PCI_DEVICES) -> bool:
    try:
        return any(
            path.read_text().strip() == GOOGLE_PCI_VENDOR for path in pci_devices.glob("*/vendor")
        )
    except OSError:
        return False


def installed_backends() -> list[str]:
    """The TPU backends this interpreter has, found without importing them (importing one starts a
    runtime)."""
    return [name for name in BACKENDS if importlib.util.find_spec(name) is not None]


if "torch_tpu" in installed_backends() and not has_tpu_chip():
    # No chip, so TorchTPU would register no device: `import torch` need not load it (a CPU run then
    # never starts libtpu), libtpu has nothing to ask the metadata server about, and its logs say
    # nothing.
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    warnings.filterwarnings("ignore", message="<TorchTpu/Performance/TcMalloc/")

import torch  # noqa: E402 - after the environment above
import torch.distributed as dist  # noqa: E402

import ddp  # noqa: E402
import harness  # noqa: E402
from harness import RecipeError  # noqa: E402


def choose(requested: str) -> str:
    """The backend ``--tpu-backend requested`` means here (auto: the installed one, torch_xla if
    both are); RecipeError when it is not installed."""
    installed = installed_backends()
    if requested == "auto" and installed:
        return installed[0]
    if requested in installed:
        return requested
    wanted = "a TPU backend (torch_xla or torch_tpu)" if requested == "auto" else requested
    found = f"; installed: {', '.join(installed)}" if installed else ""
    raise RecipeError(
        f"--device tpu needs {wanted}, which is not installed here{found}; use the tpu-vm image "
        "(or PJRT_DEVICE=CPU with torch_xla installed for a CPU dry run)"
    )


def resolve(args: argparse.Namespace) -> str:
    """For --device tpu: the backend, with ``args.strategy`` and ``args.cores`` filled in from each
    other; RecipeError when they do not fit, or when the backend cannot train here."""
    backend = choose(args.tpu_backend)
    every_device = EVERY_DEVICE[backend]
    args.strategy = args.strategy or (every_device[0] if args.cores == "all" else "single")
    args.cores = args.cores or ("1" if args.strategy == "single" else "all")
    if args.strategy != "single" and args.strategy not in every_device:
        raise RecipeError(
            f"--strategy {args.strategy} is not {backend}'s; use single or "
            f"{' or '.join(every_device)}"
        )
    if (args.cores == "1") != (args.strategy == "single"):
        raise RecipeError(
            f"--cores {args.cores} does not fit --strategy {args.strategy}: --strategy single "
            f"trains on one core, {' and '.join(every_device)} on all of them"
        )
    if backend == "torch_xla":
        harness.import_torch_xla()
    else:
        torch_tpu_device()
    return backend


def torch_tpu_device() -> torch.device:
    """TorchTPU's ``tpu`` device (this process's chip, ``tpu:0`` under torchrun), or RecipeError
    saying why not."""
    from importlib import metadata

    version = metadata.version("torch-tpu")
    try:
        import torch_tpu  # noqa: F401 - registers the "tpu" device where there is a chip
    except ImportError as exc:
        raise RecipeError(
            f"--device tpu: torch_tpu {version} is installed but does not import "
            f"({' '.join(str(exc).split())}); it needs torch 2.11-2.15"
        ) from None
    accelerator = torch.accelerator.current_accelerator()
    if accelerator is None or accelerator.type != "tpu":
        raise RecipeError(
            f"--device tpu: TorchTPU found no TPU on this host (torch_tpu {version} has no CPU "
            "mode); run on a TPU VM, or use --device cpu"
        )
    return torch.device("tpu")


def data_parallel(
    script: str,
    argv: list[str] | None,
    train: Callable[[dict], None],
    before_start: Callable[[], object],
) -> None:
    """DDP on every TPU device, one process each. Started by the user: ``before_start()`` (checks
    worth one line, not one per process), then ``script argv`` again under torchrun, as TorchTPU's
    launcher does. In one of torchrun's processes: join TorchTPU's process group, ``train(fields)``
    with the harness.Replicas fields of this process, wait for every process, and leave the
    group."""
    device = torch_tpu_device()
    if not ddp.under_torchrun():
        before_start()
        # Topology and one port per device, for the workers to inherit. Its device count comes from
        # the PCI
        # bus: asking torch here would start the TPU runtime in this process, which the workers
        # need.
        torch.tpu.distributed.set_tpu_launch_env()
        count = len(os.environ["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(","))
        argv = sys.argv[1:] if argv is None else argv
        command = ddp.torchrun_command(argparse.Namespace(world_size=count, nnodes=1), script, argv)
        raise SystemExit(subprocess.run(command, check=False).returncode)
    dist.init_process_group(backend="tpu_dist")  # registered once the device is up
    world, nodes = ddp.torchrun_topology()
    try:
        train(
            {
                "device": device,
                "rank": dist.get_rank(),
                "world_size": world,
                "local_rank": int(os.environ["LOCAL_RANK"]),
                "nodes": nodes,
            }
        )
        dist.barrier()
    finally:
        dist.destroy_process_group()

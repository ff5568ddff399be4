"""Train briefly on every device kind this host has: "OK" with the step time, or one line saying why
not.

    python recipes/probe.py                      # one line per device
    python recipes/probe.py --json               # one JSON line
    PJRT_DEVICE=CPU python recipes/probe.py      # torch_xla on XLA:CPU where there is no TPU

What a user runs first on a new DGX or TPU VM (``envkit doctor --probe``, or inside a target's image
with ``--image TARGET``):

- cpu: always, one step of the MNIST net;
- cuda: on each visible GPU one matmul and three steps; with two or more GPUs a
  two-process NCCL all-reduce;
- tpu: one step on the installed backend, torch_xla or torch_tpu.

Exit status 0 when every device found trained (devices that are absent are not failures), 1 when one
failed.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import tpu_backend
from mnist import Net

BATCH = 64
MATMUL_SIZE = 2048
CUDA_STEPS = 3
PCI_DEVICES = tpu_backend.PCI_DEVICES  # where has_tpu_hardware looks (tests point it elsewhere)
NCCL_TIMEOUT = datetime.timedelta(seconds=60)


@dataclass
class Result:
    device: str  # "cpu", "cuda:0", "cuda:0+1 nccl", "tpu"
    status: str  # "ok" | "absent" | "failed"
    detail: str  # what ran, or why it did not
    step_s: float | None = None  # the last training step's time
    backend: str | None = None  # tpu: "torch_xla" | "torch_tpu"


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def train_steps(device: torch.device, steps: int, synchronize: Callable[[], None]) -> float:
    """Train the MNIST net for ``steps`` steps on random data; the last step's seconds."""
    torch.manual_seed(0)
    model = Net().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    images = torch.randn(BATCH, 1, 28, 28).to(device)
    labels = torch.randint(0, 10, (BATCH,)).to(device)
    seconds = 0.0
    for _ in range(steps):
        started = time.perf_counter()
        optimizer.zero_grad()
        loss = F.nll_loss(model(images), labels)
        loss.backward()
        optimizer.step()
        synchronize()
        seconds = time.perf_counter() - started
        # Materialised on every backend alike (a TorchTPU rule: no rank-specific .item()).
        if not torch.isfinite(loss).item():
            raise RuntimeError(f"the loss is {loss.item()}")
    return seconds


# --------------------------------------------------------------------------- cpu


def probe_cpu() -> Result:
    try:
        step = train_steps(torch.device("cpu"), 1, lambda: None)
    except Exception as exc:  # noqa: BLE001 - any failure is the probe's answer
        return Result("cpu", "failed", one_line(exc))
    return Result(
        "cpu",
        "ok",
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads",
        step,
    )


# --------------------------------------------------------------------------- cuda


def probe_cuda() -> list[Result]:
    if not torch.cuda.is_available():
        if torch.version.cuda is None:
            why = f"torch {torch.__version__} is a CPU-only build"
        else:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            why = f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees none" + (
                f"; CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
            )
        return [Result("cuda", "absent", f"no CUDA device ({why})")]
    results = [probe_gpu(index) for index in range(torch.cuda.device_count())]
    if torch.cuda.device_count() >= 2:
        results.append(probe_nccl())
    return results


def probe_gpu(index: int) -> Result:
    device = torch.device("cuda", index)
    name = f"cuda:{index}"
    try:
        label = torch.cuda.get_device_name(device)
        a = torch.randn(MATMUL_SIZE, MATMUL_SIZE, device=device)
        torch.cuda.synchronize(device)
        started = time.perf_counter()
        product = a @ a
        torch.cuda.synchronize(device)
        matmul_s = time.perf_counter() - started
        if not torch.isfinite(product).all().item():
            raise RuntimeError("the matmul produced non-finite values")
        step = train_steps(device, CUDA_STEPS, lambda: torch.cuda.synchronize(device))
    except Exception as exc:  # noqa: BLE001
        return Result(name, "failed", one_line(exc))
    return Result(name, "ok", f"{label}; matmul {MATMUL_SIZE}^2 {matmul_s * 1e3:.1f} ms", step)


def _all_reduce_worker(rank: int, port: int, times) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=device, timeout=NCCL_TIMEOUT)
    try:
        values = torch.full((1 << 20,), float(rank + 1), device=device)
        dist.all_reduce(values)  # the first collective also sets up NCCL's communicator
        started = time.perf_counter()
        dist.all_reduce(values)
        torch.cuda.synchronize(device)
        if rank == 0:
            times.put(time.perf_counter() - started)
        if values[0].item() != 6.0:  # (1 + 2), all-reduced twice
            raise RuntimeError(f"all_reduce gave {values[0].item()}, expected 6.0")
    finally:
        dist.destroy_process_group()


def probe_nccl() -> Result:
    name = "cuda:0+1 nccl"
    try:
        with socket.socket() as sock:  # a free port for the rendezvous
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        times = mp.get_context("spawn").SimpleQueue()
        mp.spawn(_all_reduce_worker, args=(port, times), nprocs=2, join=True)
        seconds = times.get()
    except Exception as exc:  # noqa: BLE001
        return Result(name, "failed", one_line(exc))
    return Result(
        name,
        "ok",
        f"two-process all-reduce of 4 MB, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}",
        seconds,
    )


# --------------------------------------------------------------------------- tpu


def has_tpu_hardware() -> bool:
    return tpu_backend.has_tpu_chip(PCI_DEVICES)


def probe_tpu(tpu_present: bool) -> list[Result]:
    backends = [
        name for name in ("torch_xla", "torch_tpu") if importlib.util.find_spec(name) is not None
    ]
    if not backends:
        return [
            Result("tpu", "absent", "no TPU backend installed (neither torch_xla nor torch_tpu)")
        ]
    probes = {"torch_xla": probe_torch_xla, "torch_tpu": probe_torch_tpu}
    return [probes[name](tpu_present) for name in backends]


def probe_torch_xla(tpu_present: bool) -> Result:
    version = importlib.metadata.version("torch_xla")
    pjrt = os.environ.get("PJRT_DEVICE", "")
    # Without a TPU, torch_xla's TPU runtime would look for the VM's metadata
    # server: only an explicit other PJRT device (CPU, CUDA) is tried.
    if not tpu_present and pjrt in ("", "TPU"):
        return Result(
            "tpu",
            "absent",
            f"no TPU device (no Google TPU on the PCI bus); torch_xla {version} can run on XLA:CPU "
            "with PJRT_DEVICE=CPU",
            backend="torch_xla",
        )
    try:
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr

        def synchronize() -> None:
            torch_xla.sync()
            xm.wait_device_ops()

        step = train_steps(torch_xla.device(), 1, synchronize)
        kind = xr.device_type()
    except Exception as exc:  # noqa: BLE001
        return Result("tpu", "failed", f"torch_xla {version}: {one_line(exc)}", backend="torch_xla")
    where = f"XLA:{kind}" + ("" if kind == "TPU" else f" (PJRT_DEVICE={pjrt}, not a TPU)")
    return Result(
        "tpu",
        "ok",
        f"torch_xla {version} on {where}; first step, compilation included",
        step,
        "torch_xla",
    )


def probe_torch_tpu(tpu_present: bool) -> Result:
    version = importlib.metadata.version("torch_tpu")
    if not tpu_present:
        # torch_tpu has no CPU or simulation mode: without a chip it registers no device.
        return Result(
            "tpu",
            "absent",
            f"no TPU device (no Google TPU on the PCI bus); torch_tpu {version} has no CPU mode",
            backend="torch_tpu",
        )
    try:
        import torch_tpu  # noqa: F401 - registers the "tpu" device

        accelerator = torch.accelerator.current_accelerator()
        if accelerator is None or accelerator.type != "tpu":
            raise RuntimeError(
                f"torch_tpu registered no tpu device (current accelerator: {accelerator})"
            )
        step = train_steps(torch.device("tpu"), 1, torch.accelerator.synchronize)
    except Exception as exc:  # noqa: BLE001
        return Result("tpu", "failed", f"torch_tpu {version}: {one_line(exc)}", backend="torch_tpu")
    return Result(
        "tpu",
        "ok",
        f"torch_tpu {version}, {torch.accelerator.device_count()} devices; first step",
        step,
        "torch_tpu",
    )


# --------------------------------------------------------------------------- report


def environment() -> dict:
    return {
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def format_line(result: Result) -> str:
    status = {"ok": "OK", "absent": "--", "failed": "FAILED"}[result.status]
    step = f"step {result.step_s * 1e3:.1f} ms; " if result.step_s is not None else ""
    return f"{result.device:<14} {status:<6} {step}{result.detail}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="probe.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--json", action="store_true", help="print one JSON line instead of one line per device"
    )
    # run.sh passes every recipe its mounts; the probe writes nothing.
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--results-dir", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tpu_present = has_tpu_hardware()
    if not tpu_present:
        # Where torch_tpu is installed, `import torch` loads it, and the first
        # backward() on any device asks libtpu for its devices; with no chip,
        # libtpu would retry the VM's metadata server for minutes.
        os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    # TPU first: a backend imported after autograd's first backward() finds the
    # engine's device queues already sized without it.
    tpu = probe_tpu(tpu_present)
    results = [probe_cpu(), *probe_cuda(), *tpu]
    failed = any(result.status == "failed" for result in results)
    if args.json:
        record = {
            **environment(),
            "ok": not failed,
            "devices": [asdict(result) for result in results],
        }
        print(json.dumps(record, sort_keys=True))
    else:
        env = environment()
        print(f"probe: torch {env['torch']}, Python {env['python']}, host {env['host']}")
        for result in results:
            print(format_line(result))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

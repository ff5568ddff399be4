"""`envkit report` of 5,000 results files: markdown, csv and the plot, each timed with its peak memory,
against issue 32's figure (≤ 5 s, ≤ 300 MB).

The files are generated (no run needed): run wrapper records of 4 experiments on 4 targets with a few argument
sets and repeats, each with a full environment (about 150 distributions), metrics and two 100-step series, about
12 KB each as real records are. Each command runs in a fresh process (`python -m envkit report ...`); its peak
RSS is the child's ru_maxrss, and its CPU seconds (user + system) stand beside the wall time: on a shared machine
the wall time waits for the other processes, the CPU time does not. Figures, never asserted.

    .venv/bin/python benchmarks/bench_report.py [--files 5000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_environment import environment

TARGETS = (("cpu", "cpu"), ("cuda", "cuda"), ("tpu-vm", "tpu"), ("colab-t4", "cuda"))
EXPERIMENTS = ("train", "ddp", "dvclive", "mnist-example")
FIGURE_S, FIGURE_MB = 5.0, 300.0


def record(index: int) -> dict:
    """The index-th run: spread over experiments, targets, 5 argument sets and 2 locks per target."""
    experiment = EXPERIMENTS[index % len(EXPERIMENTS)]
    target, device = TARGETS[(index // len(EXPERIMENTS)) % len(TARGETS)]
    epochs = 1 + (index // 16) % 5
    steps = list(range(100))
    return {
        "schema_version": 3,
        "run_name": f"{experiment}-{index:05d}",
        "run": {
            "record_version": 1,
            "experiment": experiment,
            "argv": ["python", f"{experiment}.py", "--epochs", str(epochs)],
            "exit_status": 1 if index % 97 == 0 else 0,
            "started_at": f"2026-11-{1 + index % 28:02d}T{index % 24:02d}:00:00+00:00",
            "wall_time_s": 4.0 + (index % 7) * 0.3 + (0 if device == "cpu" else -3.0),
            "device": {
                "observed": True,
                "accelerator": device,
                "name": f"{device} device",
                "count": 1,
                "label": device,
            },
        },
        "target": target,
        "metrics": {"acc": 0.5 + (index % 10) / 40, "loss": 1.0 / (1 + index % 13), "step": 99},
        "series": {
            "acc": {"step": steps, "value": [min(1.0, 0.1 + step / 120) for step in steps]},
            "train/loss": {"step": steps, "value": [2.0 / (1 + step) for step in steps]},
        },
        "environment": environment(
            device,
            f"envkit-{target}:latest",
            f"{(index // 2000) % 2 + ord(target[0]) % 8:x}" * 64,
            [f"package-{number:03d}==1.{number}.0" for number in range(150)],
            torch="2.9.0",
            git_revision="0123456789abcdef0123456789abcdef01234567",
        ),
    }


def generate(directory: Path, count: int) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    total = 0
    for index in range(count):
        text = json.dumps(record(index), indent=1)
        (directory / f"run-{index:05d}.json").write_text(text, encoding="utf-8")
        total += len(text)
    return total


def measured(argv: list[str]) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS MB, output bytes) of one envkit command in a fresh process."""
    started = time.perf_counter()
    # A process of its own per command: RUSAGE_CHILDREN's peak would otherwise be the largest child so far.
    probe = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)\n"
        "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(len(done.stdout), done.returncode, usage.ru_maxrss, usage.ru_utime + usage.ru_stime)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - started
    size, status, peak_kb, cpu = out.split()
    if status != "0":
        raise SystemExit(f"{' '.join(argv)} exited {status}")
    return wall, float(cpu), int(peak_kb) / 1024, int(size)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--keep", type=Path, default=None, help="generate into DIR and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        results = args.keep or Path(scratch) / "results"
        size = generate(results, args.files)
        print(f"{args.files} results files, {size / 1e6:.1f} MB")
        envkit = [sys.executable, "-m", "envkit", "report", str(results), "--config", os.devnull]
        plot = Path(scratch) / "plot.png"
        for name, argv in (
            ("markdown", envkit),
            ("csv", [*envkit, "--format", "csv"]),
            ("markdown + plot", [*envkit, "--plot", str(plot)]),
        ):
            wall, cpu, peak, output = measured(argv)
            print(
                f"{name:16} {wall:6.2f} s wall, {cpu:6.2f} s CPU ({cpu / FIGURE_S:.2f}× the {FIGURE_S:g} s figure)  "
                f"{peak:5.0f} MB peak ({peak / FIGURE_MB:.2f}× the {FIGURE_MB:g} MB figure)  {output / 1e3:.0f} kB out"
            )
        if plot.exists():
            from struct import unpack

            width, height = unpack(">II", plot.read_bytes()[16:24])
            print(f"plot: {width} × {height} px, {plot.stat().st_size / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""E3 for real: the four runs of `e3-batch-scaling`, then their report table (figures, never asserts).

    .venv/bin/python benchmarks/bench_e3.py                         # XLA:CPU, 8 virtual devices, .venv-xla
    .venv/bin/python benchmarks/bench_e3.py --epochs 3 --plot e3.png
    .venv/bin/python benchmarks/bench_e3.py --python /usr/bin/python3 --no-cpu   # on a TPU VM, its real cores

Each run goes through `envkit experiment --python PYTHON e3-batch-scaling`, the
command `make e3-batch-scaling RECIPE_PYTHON=...` runs: MNIST-shaped generated data,
per-replica batch 16 and 128, each with and without linear learning-rate scaling plus
warm-up. Off a TPU, PJRT_DEVICE=CPU CPU_NUM_DEVICES=8 makes XLA:CPU's 8 virtual
devices the 8 replicas (SPMD, one process). Printed: the wall time of the whole
experiment and the report's E3 table (test accuracy, s/epoch per run); with --plot
also its figure. Seconds on a shared CPU measure the machine's load as much as the
runs: the accuracies are the result.
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

REPO_ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = "e3-batch-scaling"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--python",
        default=str(REPO_ROOT / ".venv-xla" / "bin" / "python"),
        help="the interpreter with torch_xla that runs the recipe (default: .venv-xla)",
    )
    parser.add_argument("--no-cpu", action="store_true", help="run on the host's TPU, not XLA:CPU's virtual devices")
    parser.add_argument("--devices", type=int, default=8, help="XLA:CPU devices, the replicas (default: 8)")
    parser.add_argument("--epochs", type=int, default=None, help="override the experiment's epochs")
    parser.add_argument(
        "--results-dir", type=Path, default=None, help="keep the results here (default: a temporary one)"
    )
    parser.add_argument("--plot", type=Path, default=None, help="also write the report's figure (PNG)")
    args = parser.parse_args()

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    if not args.no_cpu:
        env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(args.devices))
    with tempfile.TemporaryDirectory(prefix="envkit-e3-") as scratch:
        results = args.results_dir or Path(scratch)
        recipe_flags = ["--quiet"] + (["--epochs", str(args.epochs)] if args.epochs else [])
        started = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "envkit",
                "experiment",
                "--python",
                args.python,
                "--results-dir",
                str(results),
                EXPERIMENT,
                "--",
                *recipe_flags,
            ],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - started
        if done.returncode != 0:
            print("\n".join(line for line in done.stderr.splitlines() if "GSPMD" not in line)[-3000:], file=sys.stderr)
            return done.returncode
        report = subprocess.run(
            [sys.executable, "-m", "envkit", "report", str(results), "--format", "json"],
            env=env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        rows = [row for row in json.loads(report.stdout)["rows"] if row["experiment"] == EXPERIMENT]
        where = "this host's TPU" if args.no_cpu else f"XLA:CPU, {args.devices} virtual devices"
        print(f"E3 ({where}): {len(rows)} runs in {wall:.0f} s wall\n")
        print(
            "| run | global batch | lr scaling | warm-up | lr | epochs | test accuracy | s/epoch | first epoch s | later epochs s/epoch |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for row in rows:
            print(
                f"| {row['run']} | {row['global_batch']} | {row['lr_scaling']} | {row['warmup_epochs']} | {row['effective_lr']:g} "
                f"| {row['epochs']} | {100 * row['test_accuracy']:.2f}% | {row['epoch_s_mean']:.2f} | {row['first_epoch_s']:.2f} "
                f"| {_or_dash(row['steady_epoch_s_mean'])} |"
            )
        if args.plot:
            subprocess.run(
                [sys.executable, "-m", "envkit", "report", str(results), "--plot", str(args.plot)],
                env=env,
                cwd=REPO_ROOT,
                stdout=subprocess.DEVNULL,
                check=True,
            )
            print(f"\nfigure: {args.plot}")
    return 0


def _or_dash(value) -> str:
    return "–" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())

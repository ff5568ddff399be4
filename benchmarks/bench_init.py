"""A user's first minutes: `envkit init`, `envkit lock --all` and `envkit render --all` on
tests/example_project (figures, never asserted).

Each step runs in a fresh copy of the example project, REPEAT times, uv's cache warm after the first
lock; a target whose PyTorch index cannot be reached here (cpu) fails its lock fast, is reported, and
renders unlocked. Render runs twice: cold (no render memo for the copy) and remembered.

    .venv/bin/python benchmarks/bench_init.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "tests" / "example_project"


def envkit(project: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    # No Docker engine: the base's digest would be asked of a registry off this machine.
    env = {**os.environ, "DOCKER_HOST": f"unix://{project}/no-engine.sock", "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "envkit", *args], cwd=project, capture_output=True, text=True, env=env)
    return time.perf_counter() - start, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    steps = {"init": ("init",), "lock --all": ("lock", "--all"), "render --all (cold)": ("render", "--all")}
    steps["render --all (remembered)"] = ("render", "--all")
    times: dict[str, list[float]] = {step: [] for step in steps}
    failed: set[str] = set()
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="envkit-bench-init-") as work:
            project = Path(work) / "mine"
            shutil.copytree(EXAMPLE, project)
            for step, argv in steps.items():
                seconds, done = envkit(project, *argv)
                times[step].append(seconds)
                if done.returncode != 0:
                    failed.add(
                        f"{step}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
                    )
    print(f"{'step':<28}{'median s':>10}{'min s':>8}  (tests/example_project, {args.repeat} runs)")
    for step, values in times.items():
        print(f"{step:<28}{statistics.median(values):>10.2f}{min(values):>8.2f}")
    total = sum(statistics.median(values) for step, values in times.items() if "remembered" not in step)
    print(f"{'init + lock + render':<28}{total:>10.2f}")
    for line in sorted(failed):
        print(f"note: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

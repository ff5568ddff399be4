"""Wall time of `envkit render --all` (goal: well under 0.5 s) and proof that it imports no torch.

Measures, side by side in one run:
  - in-process: load_config + render + write into a fresh temp dir (what the CLI does after start-up);
  - subprocess: `python -m envkit render --all --output TMP` (what a user waits for),
    against a bare `python -c pass` start-up as the floor;
and reports whether torch, docker or matplotlib were imported on that path.

usage: python benchmarks/bench_render.py [--repeat N] [--config envkit.yaml]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "torchvision", "torch_xla", "docker", "matplotlib", "numpy")
GOAL_S = 0.5


def timed(action, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return times


def in_process(config: Path, output: Path) -> None:
    from envkit import render
    from envkit.config import load_config

    loaded = load_config(config)
    render.write(output, render.render(loaded, list(loaded.targets)))


def subprocess_render(config: Path, output: Path) -> None:
    command = [sys.executable, "-m", "envkit", "render", "--all", "--config", str(config), "--output", str(output)]
    subprocess.run(command, check=True, capture_output=True)


def heavy_modules(config: Path, output: Path) -> list[str]:
    probe = (
        "import sys, json; from envkit.cli import main;"
        f"main(['render', '--all', '--config', {str(config)!r}, '--output', {str(output)!r}]);"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))"
    )
    result = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    return json.loads(result.stdout.splitlines()[-1])


def summary(name: str, times: list[float]) -> str:
    return f"{name:<28} median {statistics.median(times) * 1000:7.1f} ms   min {min(times) * 1000:7.1f} ms   n={len(times)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--config", type=Path, default=REPO / "envkit.yaml")
    args = parser.parse_args()
    config = args.config.resolve()

    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / "docker"
        in_process(config, output)  # warm the file cache once before timing anything
        python_floor = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), args.repeat)

        def fresh() -> Path:
            # A new directory each time, so every file is written: the slow case.
            return Path(tempfile.mkdtemp(dir=scratch)) / "docker"

        inside = timed(lambda: in_process(config, fresh()), args.repeat)
        outside = timed(lambda: subprocess_render(config, fresh()), args.repeat)
        heavy = heavy_modules(config, output)

    median = statistics.median(outside)
    print(f"envkit render --all ({config.name}, {sys.executable})")
    print(summary("python -c pass (floor)", python_floor))
    print(summary("in-process render --all", inside))
    print(summary("subprocess render --all", outside))
    print(f"subprocess / goal ({GOAL_S:.1f} s): {median / GOAL_S:.2f}; "
          f"envkit's own share: {(median - statistics.median(python_floor)) * 1000:.1f} ms")
    print(f"heavy modules imported: {', '.join(heavy) if heavy else 'none (no torch, docker, matplotlib)'}")
    return 0 if median < GOAL_S and not heavy else 1


if __name__ == "__main__":
    raise SystemExit(main())

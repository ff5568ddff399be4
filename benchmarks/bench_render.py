"""Wall and CPU time of `envkit render --all` beside a bare interpreter, and proof that it imports no torch.

Measures, side by side in one run:
  - in-process: load_config + render + write into a fresh temp dir (what the CLI does after start-up);
  - subprocess: `python -m envkit render --all --output TMP` (what a user waits for), with envkit's
    cache warm (the usual case) and cold (a fresh ENVKIT_CACHE_DIR: the first run after a change
    to the config or the templates pays for jsonschema and for compiling the templates),
    against a bare `python -c pass` start-up as the floor;
and reports whether torch, docker, matplotlib (or, on a warm cache, jsonschema) were imported on that path.

CPU time (user + system of the child) is printed beside wall time because on a shared,
loaded machine wall time mostly measures the other processes.
Subprocesses run with bytecode writing allowed (PYTHONDONTWRITEBYTECODE removed), as an
installed envkit has its .pyc files; otherwise every run would recompile envkit's modules.

usage: python benchmarks/bench_render.py [--repeat N] [--config envkit.yaml]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "torchvision", "torch_xla", "docker", "matplotlib", "numpy")
GOAL_S = 0.12


def timed(action, repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each run of ``action`` (CPU: this process and its children)."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = _cpu()
        start = time.perf_counter()
        action()
        walls.append(time.perf_counter() - start)
        cpus.append(_cpu() - before)
    return walls, cpus


def _cpu() -> float:
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def child_env(cache: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if cache is not None:
        env["ENVKIT_CACHE_DIR"] = str(cache)
    return env


def in_process(config: Path, output: Path) -> None:
    from envkit.render import target_files as render
    from envkit.project.config import load_config

    loaded = load_config(config)
    render.write(output, render.render_targets(loaded, list(loaded.targets)))


def subprocess_render(config: Path, output: Path, env: dict[str, str]) -> None:
    command = [sys.executable, "-m", "envkit", "render", "--all", "--config", str(config), "--output", str(output)]
    subprocess.run(command, check=True, capture_output=True, env=env)


def imported_on_render(config: Path, output: Path, env: dict[str, str]) -> list[str]:
    watched = (*HEAVY, "jsonschema")
    probe = (
        "import sys, json; from envkit.cli import main;"
        f"main(['render', '--all', '--config', {str(config)!r}, '--output', {str(output)!r}]);"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {watched!r} and '.' not in m)))"
    )
    result = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, env=env)
    return json.loads(result.stdout.splitlines()[-1])


def summary(name: str, times: tuple[list[float], list[float]], floor: float | None = None) -> str:
    walls, cpus = times
    line = (f"{name:<34} wall median {statistics.median(walls) * 1000:7.1f} ms   "
            f"cpu median {statistics.median(cpus) * 1000:7.1f} ms   min {min(cpus) * 1000:7.1f} ms   n={len(walls)}")
    if floor:
        line += f"   cpu / floor {statistics.median(cpus) / floor:4.1f}x"
    return line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--config", type=Path, default=REPO / "envkit.yaml")
    args = parser.parse_args()
    config = args.config.resolve()
    sys.path.insert(0, str(REPO))  # this checkout's envkit, as the subprocesses get through PYTHONPATH

    with tempfile.TemporaryDirectory() as scratch:
        warm = child_env()

        def fresh() -> Path:
            # A new directory each time, so every file is written: the slow case.
            return Path(tempfile.mkdtemp(dir=scratch)) / "docker"

        in_process(config, fresh())  # warm the file cache once before timing anything
        subprocess_render(config, fresh(), warm)  # ... and envkit's cache and .pyc files
        python_floor = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True, env=warm), args.repeat)
        inside = timed(lambda: in_process(config, fresh()), args.repeat)
        outside = timed(lambda: subprocess_render(config, fresh(), warm), args.repeat)
        cold = timed(lambda: subprocess_render(config, fresh(), child_env(Path(tempfile.mkdtemp(dir=scratch)))), args.repeat)
        imported = imported_on_render(config, fresh(), warm)

    floor = statistics.median(python_floor[1])
    median_wall, median_cpu = (statistics.median(times) for times in outside)
    print(f"envkit render --all ({config.name}, {sys.executable})")
    print(summary("python -c pass (floor)", python_floor))
    print(summary("in-process render --all", inside))
    print(summary("subprocess render --all", outside, floor))
    print(summary("subprocess render --all, cold cache", cold, floor))
    print(f"goal {GOAL_S:.2f} s: wall median {median_wall:.3f} s, cpu median {median_cpu:.3f} s; "
          f"envkit's own share (cpu over the floor): {(median_cpu - floor) * 1000:.1f} ms")
    heavy = [name for name in imported if name in HEAVY]
    print(f"heavy modules imported: {', '.join(heavy) if heavy else 'none (no torch, docker, matplotlib)'}; "
          f"jsonschema {'imported' if 'jsonschema' in imported else 'not imported'} on a warm cache")
    return 0 if median_cpu <= GOAL_S and not heavy else 1


if __name__ == "__main__":
    raise SystemExit(main())

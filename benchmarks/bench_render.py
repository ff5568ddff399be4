"""`envkit render` in a user project beside hpccm and a bare interpreter, and proof that it imports no torch.

The project is the one a user has after their first minutes: tests/example_project copied to a temporary
directory, `envkit init`, then `envkit lock --all` against the default index (a target that cannot be locked
here stays unlocked and is named; the cuda target must lock). Measures, side by side in one run:
  - `envkit render --target cuda` in that project against hpccm 25.9 rendering the counterpart recipe
    (benchmarks/hpccm/cuda_recipe.py), both whole processes in one interpreter (.venv-bench from
    requirements/bench.lock, `make bench-env`; envkit from this checkout through PYTHONPATH), so
    both pay the same start-up; the ratio envkit / hpccm is the figure (goal <= 0.8). Beside it, the
    same render on a memo miss (envkit.render.memo: the render after a lock changed, in full, with its
    templates compiled and its config checked by an earlier run) and on a cold cache (goal <= 1.5 for both),
    and the floors below, all in one round robin with hpccm: each ratio is taken within its round (paired) and
    printed as min / median / max over the rounds;
  - in-process: load_config + render + write of the image targets into a fresh temp dir (what the CLI does
    after start-up, less the memo);
  - subprocess: `python -m envkit render --all --output TMP` (what a user waits for), with envkit's
    cache warm (the usual case) and cold (a fresh ENVKIT_CACHE_DIR, as on a new machine: it pays for
    jsonschema and for compiling the templates),
    against a bare `python -c pass` start-up as the floor;
  - the kept libraries' own floor: `import jinja2` (what every render the memo misses needs) and
    `import jinja2, yaml` (what a render on a cold cache needs: it parses the user's envkit.yaml, then checks it
    with validators generated ahead of time, standard library only), each whole process beside hpccm's;
and reports whether torch, docker, matplotlib (or, on a warm cache, jsonschema) were imported on that path.
Every render writes into a fresh directory, so every file is written: the slow case.

A render creates files and folders (on a cold cache 13 and 5), hpccm none: on ext4 each creation costs more for
minutes after many files were removed from the same file system (its inode allocator passes over inodes freed
lately), and that cost rose a cold render's CPU time by a fifth in back-to-back runs, each after the last one's
clean-up. Start it some minutes after a test run, CI or another benchmark (docs/benchmarks.md, the eighth round).

CPU time (user + system of the child) is printed beside wall time because on a shared,
loaded machine wall time mostly measures the other processes.
Subprocesses run with bytecode writing allowed (PYTHONDONTWRITEBYTECODE removed), as an
installed envkit has its .pyc files; otherwise every run would recompile envkit's modules.

usage: python benchmarks/bench_render.py [--repeat N] [--project DIR] [--bench-python .venv-bench/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_init import EXAMPLE, envkit
from intervals import against, median_interval

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "torchvision", "torch_xla", "docker", "matplotlib", "numpy")
GOAL_RATIO = 0.8  # envkit render --target cuda over hpccm, whole processes, when its memo remembers it (issue 42)
MISS_GOAL_RATIO = 1.5  # the same after a lock changed and on a cold cache (issue 42)
HPCCM_RECIPE = REPO / "benchmarks" / "hpccm" / "cuda_recipe.py"
# What a render imports from kept libraries, by case: their import alone bounds the ratio from below.
# A cold render checks envkit.yaml with validators generated ahead of time: no jsonschema (issue 42).
LIBRARY_FLOORS = {"miss": "import jinja2", "cold": "import jinja2, yaml"}


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


def user_project(scratch: Path) -> Path:
    """tests/example_project after `envkit init` and `envkit lock --all` (the cuda target locked, at least)."""
    project = scratch / "mine"
    shutil.copytree(EXAMPLE, project)
    for argv in (("init",), ("lock", "--all")):
        _, done = envkit(project, *argv)
    if not (project / "docker" / "cuda" / "requirements.lock").is_file():
        raise SystemExit(f"bench_render.py: error: the cuda target did not lock: {done.stderr.strip()}")
    return project


def unlocked(config: Path) -> list[str]:
    """The project's targets without a lock: they render unlocked."""
    from envkit.lock.lockfile import lock_path
    from envkit.project.load import load_config

    loaded = load_config(config)
    return [name for name in loaded.targets if not lock_path(loaded, name).exists()]


def in_process(config: Path, output: Path) -> None:
    from envkit.project.load import load_config
    from envkit.render import output as rendered
    from envkit.render import target_files as render

    loaded = load_config(config)
    rendered.write(output, render.render_targets(loaded, list(loaded.images)))  # its docker/ files


def subprocess_render(
    config: Path, output: Path, env: dict[str, str], python: str = sys.executable, which: tuple[str, ...] = ("--all",)
) -> None:
    # From the project's root, as its user runs it.
    command = [python, "-m", "envkit", "render", *which, "--output", str(output)]
    subprocess.run(command, check=True, capture_output=True, env=env, cwd=config.parent)


def hpccm_render(python: str) -> None:
    hpccm = Path(python).parent / "hpccm"
    subprocess.run([str(hpccm), "--recipe", str(HPCCM_RECIPE), "--format", "docker"], check=True, capture_output=True)


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
    line = (
        f"{name:<34} wall median {statistics.median(walls) * 1000:7.1f} ms   "
        f"cpu median {statistics.median(cpus) * 1000:7.1f} ms   min {min(cpus) * 1000:7.1f} ms   n={len(walls)}"
    )
    if floor:
        line += f"   cpu / floor {statistics.median(cpus) / floor:4.1f}x"
    return line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--project",
        type=Path,
        help="a user project already initialised and locked (default: a copy of tests/example_project, "
        "initialised and locked against the default index here)",
    )
    parser.add_argument(
        "--bench-python",
        default=str(REPO / ".venv-bench" / "bin" / "python"),
        help="the interpreter with hpccm and envkit's dependencies (make bench-env)",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))  # this checkout's envkit, as the subprocesses get through PYTHONPATH
    if not Path(args.bench_python).exists():
        print(
            f"bench_render.py: error: {args.bench_python} not found: run `make bench-env` (hpccm and envkit's "
            f"dependencies in one interpreter)",
            file=sys.stderr,
        )
        return 2

    with tempfile.TemporaryDirectory(prefix="envkit-bench-render-") as work:
        scratch = Path(work)
        project = args.project.resolve() if args.project else user_project(scratch)
        config = project / "envkit.yaml"
        warm = child_env()
        remembered = child_env(scratch / "cache")  # its memo is removed before each run: every render misses it

        def memo_miss() -> dict[str, str]:
            shutil.rmtree(scratch / "cache" / "render-memo", ignore_errors=True)
            return remembered

        def fresh() -> Path:
            # A new directory each time, so every file is written: the slow case.
            return Path(tempfile.mkdtemp(dir=scratch)) / "docker"

        def cold_cache() -> dict[str, str]:
            return child_env(Path(tempfile.mkdtemp(dir=scratch)))

        in_process(config, fresh())  # warm the file cache once before timing anything
        subprocess_render(config, fresh(), warm)  # ... and envkit's cache and .pyc files
        bench = args.bench_python
        subprocess_render(config, fresh(), warm, bench, ("--target", "cuda"))
        subprocess_render(config, fresh(), memo_miss(), bench, ("--target", "cuda"))
        hpccm_render(bench)
        # Every case against hpccm in one round robin, a round per repeat, so a load change on a shared machine
        # hits each case and hpccm alike; each ratio is taken within its round (paired), then summarised.
        cases = {
            "hpccm": lambda: hpccm_render(bench),
            "remembered": lambda: subprocess_render(config, fresh(), warm, bench, ("--target", "cuda")),
            "miss": lambda: subprocess_render(config, fresh(), memo_miss(), bench, ("--target", "cuda")),
            "cold": lambda: subprocess_render(config, fresh(), cold_cache(), bench, ("--target", "cuda")),
            "python -c pass": lambda: subprocess.run([bench, "-c", "pass"], check=True),
            **{
                f"floor of a {case} render": lambda code=code: subprocess.run([bench, "-c", code], check=True)
                for case, code in LIBRARY_FLOORS.items()
            },
        }
        rounds = {name: ([], []) for name in cases}
        for round_number in range(args.repeat):
            names = list(cases)
            for name in names[round_number % len(names) :] + names[: round_number % len(names)]:
                walls, cpus = timed(cases[name], 1)
                rounds[name][0].extend(walls)
                rounds[name][1].extend(cpus)
        hpccm_times = rounds["hpccm"]
        python_floor = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True, env=warm), args.repeat)
        inside = timed(lambda: in_process(config, fresh()), args.repeat)
        outside = timed(lambda: subprocess_render(config, fresh(), warm), args.repeat)
        cold = timed(lambda: subprocess_render(config, fresh(), cold_cache()), args.repeat)
        imported = imported_on_render(config, fresh(), warm)
        missing = unlocked(config)

    where = args.project or "tests/example_project after envkit init and lock --all"
    print(f"envkit render --target cuda in a user project ({where}) vs hpccm 25.9 (both in {bench})")
    for name, times in rounds.items():
        print(summary(name, times))

    def ratios(name: str, which: int) -> list[float]:
        return [case / hpccm for case, hpccm in zip(rounds[name][which], hpccm_times[which])]

    def paired(name: str, which: int) -> str:
        each = ratios(name, which)
        return f"{min(each):.2f} / {statistics.median(each):.2f} / {max(each):.2f}"

    goals = {"remembered": GOAL_RATIO, "miss": MISS_GOAL_RATIO, "cold": MISS_GOAL_RATIO}
    print(f"ratio to hpccm within each round, min / median / max over {args.repeat} rounds:")
    for name in rounds:
        if name != "hpccm":
            goal = f"   (goal: median <= {goals[name]:.1f})" if name in goals else ""
            print(f"  {name:<34} cpu {paired(name, 1)}   wall {paired(name, 0)}{goal}")
    print("each goal against the median's 95% interval (met only where the whole interval is within it):")
    for name, goal in goals.items():
        low, high = interval = median_interval(ratios(name, 1))
        print(f"  {name:<34} cpu {low:.2f}-{high:.2f}: {against(goal, interval)} (goal {goal:.1f})")
    print()
    floor = statistics.median(python_floor[1])
    print(f"envkit render --all (the same project, {sys.executable})")
    print(summary("python -c pass (floor)", python_floor))
    print(summary("in-process render --all", inside))
    print(summary("subprocess render --all", outside, floor))
    print(summary("subprocess render --all, cold cache", cold, floor))
    heavy = [name for name in imported if name in HEAVY]
    print(
        f"heavy modules imported: {', '.join(heavy) if heavy else 'none (no torch, docker, matplotlib)'}; "
        f"jsonschema {'imported' if 'jsonschema' in imported else 'not imported'} on a warm cache"
    )
    if missing:
        print(f"note: unlocked (lock --all could not lock them here), rendered so: {', '.join(missing)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

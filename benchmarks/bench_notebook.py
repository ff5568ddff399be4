"""Notebook figures, in one run: render time per notebook, installing a lock into a notebook's
environment with uv and with pip, and each committed notebook's wall time executed on this CPU.

- render: `envkit notebook`'s builder in-process, per committed notebook: the first render
  (nbformat, the schema, the templates, each embedded file read and hashed) and the median
  of --repeat warm renders after it.
- install: the notebook helper's own create_environment (envkit/notebook/runtime_venv.py) in CPU
  mode: a fresh venv holding a CPU lock (torch 2.13.0's CPU build from local disk, tqdm,
  numpy and their dependencies; tests/notebook_cpu.py), hash-checked, offline from a local
  wheelhouse; uv cold (an empty uv cache: XDG_CACHE_HOME is a fresh folder) and warm, and
  pip. On Colab or Kaggle the wheels come from the package index instead, about 4 GB for
  the TPU locks: this measures the installers, not the platforms' network.
- execute: every committed notebook top to bottom with nbclient on an ipykernel, CPU mode
  (a venv from uv's warm cache, four steps of the recipe on generated data, envkit's report).

Wall and CPU seconds side by side: the development machine is shared, so wall time mostly
measures the other processes.

usage: .venv/bin/python benchmarks/bench_notebook.py [--repeat N] [--installs N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from notebook_cpu import build_wheelhouse, cpu_mode_env, execute  # noqa: E402

from envkit.notebook import builder, runtime_venv  # noqa: E402
from envkit.project.load import load_config  # noqa: E402


def cpu_seconds() -> float:
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def timed(action):
    wall, cpu = time.perf_counter(), cpu_seconds()
    result = action()
    return result, time.perf_counter() - wall, cpu_seconds() - cpu


def render_figures(config, pairs, repeat: int) -> None:
    print("render (in-process)                 first s   warm s (median)   KiB")
    for target, experiment in pairs:
        # noqa: B023 below: each closure is called before the loop moves on
        notebook, first, _ = timed(lambda: builder.render_notebook(config, experiment, target))  # noqa: B023
        warm = [timed(lambda: builder.render_notebook(config, experiment, target))[1] for _ in range(repeat)]  # noqa: B023
        print(
            f"  {notebook.path.relative_to('notebooks').as_posix():<34} {first:7.3f}   {statistics.median(warm):7.3f}           "
            f"{len(notebook.text.encode()) // 1024}"
        )


def install_once(wheelhouse: Path, work: Path, installer: str, cache: Path) -> tuple[float, float]:
    env = {**cpu_mode_env(wheelhouse, work), runtime_venv.INSTALLER: installer, "XDG_CACHE_HOME": str(cache)}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    here = Path.cwd()
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)
    try:
        lock = {"path": "unused", "python": "unused"}  # CPU mode takes the wheelhouse's lock and this Python
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # the installers' own output
            _, wall, cpu = timed(lambda: runtime_venv.create_environment({"lock": lock}))
    finally:
        os.chdir(here)
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    return wall, cpu


def install_figures(wheelhouse: Path, scratch: Path, installs: int) -> None:
    packages = len(runtime_venv.lock_packages(wheelhouse / "requirements.lock"))
    size = sum(path.stat().st_size for path in wheelhouse.glob("*.whl")) / 2**20
    print(
        f"\ninstall a CPU lock ({packages} packages, {size:.0f} MiB of wheels) into a fresh venv, hash-checked, offline"
    )
    print("  installer        wall s    cpu s")
    rows = {"uv cold": [], "uv warm": [], "pip": []}
    for run in range(installs):
        cache = scratch / f"cache-{run}"  # empty: uv has nothing unpacked yet
        rows["uv cold"].append(install_once(wheelhouse, scratch / f"uv-{run}", "uv", cache))
        rows["uv warm"].append(install_once(wheelhouse, scratch / f"uv-{run}", "uv", cache))
        rows["pip"].append(install_once(wheelhouse, scratch / f"pip-{run}", "pip", cache))
    for name, values in rows.items():
        walls = ", ".join(f"{wall:.1f}" for wall, _ in values)
        cpus = ", ".join(f"{cpu:.1f}" for _, cpu in values)
        print(f"  {name:<14} {walls:>8}  {cpus:>8}")


def execute_figures(pairs, wheelhouse: Path, scratch: Path) -> None:
    print("\nexecute in CPU mode (nbclient + ipykernel; venv from uv's cache, 4 recipe steps, report)")
    print("  notebook                             wall s    cpu s")
    for target, experiment in pairs:
        path = REPO / builder.notebook_path(target, experiment)
        folder = scratch / target / experiment
        (_, seconds), wall, cpu = timed(lambda: execute(path, wheelhouse, folder / "work", folder / "out"))  # noqa: B023 - called at once
        print(f"  {target}/{path.name:<{33 - len(target)}} {seconds:6.1f}   {cpu:6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="warm renders per notebook (default 5)")
    parser.add_argument("--installs", type=int, default=1, help="install rounds (default 1)")
    args = parser.parse_args()
    config = load_config(REPO / "envkit.yaml")
    pairs = [(target.name, experiment) for target in config.targets.values() for experiment in target.notebooks]
    render_figures(config, pairs, args.repeat)
    with tempfile.TemporaryDirectory(prefix="envkit-bench-notebook-") as scratch:
        scratch = Path(scratch)
        wheelhouse = build_wheelhouse(scratch / "wheelhouse")
        install_figures(wheelhouse, scratch, args.installs)
        execute_figures(pairs, wheelhouse, scratch)


if __name__ == "__main__":
    main()

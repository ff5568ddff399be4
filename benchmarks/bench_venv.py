"""Installing a lock into a host venv: uv vs pip, side by side in one run (figures, never asserted).

Each installer makes the venv twice through envkit's own code (envkit.host.venv.make_venv,
what `envkit venv` and `make venv` run): cold, with an empty download cache of its own,
then warm, from that cache. Both take every file from the default index: pip's own
configuration (extra indexes, find-links, a local mirror) is set aside, since uv does not
read it. uv writes bytecode as pip does (--compile-bytecode), so both make the same venv.

    .venv/bin/python benchmarks/bench_venv.py                                  # the cuda target's lock
    .venv/bin/python benchmarks/bench_venv.py --lock requirements/xla.lock --installers uv
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from envkit.host.venv import make_venv  # noqa: E402
from envkit.lock.lockfile import read_lock  # noqa: E402


def size_gb(path: Path) -> float:
    done = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True)
    return int(done.stdout.split()[0]) / 1e9 if done.stdout else 0.0


def install(lock: Path, installer: str, work: Path, cache: Path) -> tuple[float, float]:
    """(seconds, venv GB) of one make_venv with ``cache`` as the installer's download cache."""
    venv = work / f"venv-{installer}"
    os.environ["UV_CACHE_DIR" if installer == "uv" else "PIP_CACHE_DIR"] = str(cache)
    start = time.perf_counter()
    make_venv(lock, venv, installer=installer)
    seconds = time.perf_counter() - start
    gigabytes = size_gb(venv)
    shutil.rmtree(venv)
    return seconds, gigabytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lock", type=Path, default=REPO / "docker" / "cuda" / "requirements.lock")
    parser.add_argument("--installers", nargs="+", default=["uv", "pip"], choices=["uv", "pip"])
    parser.add_argument(
        "--work", type=Path, default=None, help="scratch directory (default: a temp dir; needs ~2x the venv)"
    )
    args = parser.parse_args()
    # pip as it is on a host with no configuration: the default index only, as uv.
    os.environ["PIP_CONFIG_FILE"] = os.devnull
    for name in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        os.environ.pop(name, None)
    lock = read_lock(args.lock)
    print(
        f"lock {args.lock.relative_to(REPO) if args.lock.is_relative_to(REPO) else args.lock}: "
        f"{len(lock.packages)} packages, {args.lock.stat().st_size} bytes, python {lock.python}"
    )
    rows = []
    print(f"{'installer':<10}{'cold s':>10}{'warm s':>10}{'venv GB':>10}{'cache GB':>10}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-venv-", dir=args.work) as scratch:
        work = Path(scratch)
        for installer in args.installers:
            cache = work / f"cache-{installer}"
            cold, gigabytes = install(args.lock, installer, work, cache)
            warm, _ = install(args.lock, installer, work, cache)
            rows.append((installer, cold, warm, gigabytes, size_gb(cache)))
            print(f"{installer:<10}{cold:>10.1f}{warm:>10.1f}{gigabytes:>10.2f}{rows[-1][4]:>10.2f}", flush=True)
            shutil.rmtree(cache, ignore_errors=True)
    if len(rows) == 2:
        (_, cold_a, warm_a, _, _), (_, cold_b, warm_b, _, _) = rows
        print(f"{rows[0][0]} / {rows[1][0]}: cold {cold_a / cold_b:.2f}x, warm {warm_a / warm_b:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

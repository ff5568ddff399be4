"""`envkit lock --all` warm, and the size of every lock (figures, never asserted).

Relocks a copy of the project (config and locks; the checkout is never touched) REPEAT
times with uv's cache already warm from a first run, as `envkit lock --all` runs after a
pin changed: targets whose PyTorch index cannot be reached fail fast (one uv retry) and
are reported as such. The host environments (`requirements/*.in`) are relocked the same
way. First, each committed lock's packages, hashes and bytes.

    .venv/bin/python benchmarks/bench_lock.py [--repeat 3]
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
sys.path.insert(0, str(REPO))

from envkit.lock.lockfile import read_lock  # noqa: E402


def envkit(project: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    # No Docker engine: the base's digest would be asked of a registry off this machine.
    env = {**os.environ, "DOCKER_HOST": f"unix://{project}/no-engine.sock", "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "envkit", *args], cwd=project, capture_output=True, text=True, env=env)
    return time.perf_counter() - start, done


def copy_project(root: Path) -> Path:
    shutil.copy(REPO / "envkit.yaml", root / "envkit.yaml")
    for lock in REPO.glob("docker/*/requirements.lock"):
        (root / lock.parent.relative_to(REPO)).mkdir(parents=True, exist_ok=True)
        shutil.copy(lock, root / lock.relative_to(REPO))
    shutil.copytree(REPO / "requirements", root / "requirements")
    return root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    locks = sorted([*REPO.glob("docker/*/requirements.lock"), *REPO.glob("requirements/*.lock")])
    print(f"{'lock':<34}{'packages':>9}{'hashes':>8}{'bytes':>9}")
    for path in locks:
        lock = read_lock(path)
        hashes = path.read_text().count("--hash=sha256:")
        print(f"{str(path.relative_to(REPO)):<34}{len(lock.packages):>9}{hashes:>8}{path.stat().st_size:>9}")
    unlocked = [
        path.parent.name
        for path in REPO.glob("docker/*/Dockerfile")
        if not (path.parent / "requirements.lock").exists()
    ]
    unlocked += [path.name for path in REPO.glob("requirements/*.in") if not path.with_suffix(".lock").exists()]
    print(f"unlocked here: {', '.join(sorted(unlocked)) or 'none'}")
    with tempfile.TemporaryDirectory(prefix="bench-lock-") as scratch:
        project = copy_project(Path(scratch))
        inputs = [str(path.relative_to(REPO)) for path in sorted(REPO.glob("requirements/*.in"))]
        for title, argv in (
            ("envkit lock --all", ("lock", "--all")),
            ("envkit lock --requirements ...", ("lock", "--requirements", *inputs)),
        ):
            first, done = envkit(project, *argv)  # fills uv's cache
            times = [envkit(project, *argv)[0] for _ in range(args.repeat)]
            failed = [line.split(": error: ", 1)[1][:90] for line in done.stderr.splitlines() if ": error: " in line]
            print(
                f"{title}: first {first:.1f} s, warm {statistics.median(times):.1f} s "
                f"(median of {args.repeat}: {', '.join(f'{t:.1f}' for t in times)}); exit {done.returncode}"
            )
            for line in done.stdout.splitlines():
                print(f"  {line}")
            for line in failed:
                print(f"  cannot: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

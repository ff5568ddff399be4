"""A fresh clone's `make demo`, before and after the host went on a lock, side by side in one run.

    .venv/bin/python benchmarks/bench_fresh_demo.py                      # 84b3070 (unlocked) vs HEAD
    .venv/bin/python benchmarks/bench_fresh_demo.py --before REV --after REV --rounds 2

Each revision is cloned into a scratch folder and runs what a new user types there: `make venv`
(before: pip from the top-level pins of the dev requirements, no lock; after: requirements/dev.lock, hash-checked)
then `make demo`, with DOCKER_HOST pointing at no engine, so the demo runs in the venv it just made.
The revisions alternate round by round, so both see the same load. Downloads come from the
installers' own caches, as on a machine that has installed these packages before: say so when
quoting the figures. Printed per revision: the venv's and the demo's seconds, their total against
the 180 s goal, and the lock_sha256 each demo result records (null before the host had a lock).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 180.0


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(
            f"bench_fresh_demo: {' '.join(command)} failed in {cwd} ({done.returncode}): "
            f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}"
        )
    return time.perf_counter() - start


def fresh_demo(revision: str, scratch: Path) -> tuple[float, float, set[str | None]]:
    clone = Path(tempfile.mkdtemp(prefix=f"{revision[:12]}-", dir=scratch))
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", revision], check=True)
    # No engine answers here, so `make demo` runs the recipes in the venv; MAKELEVEL would say make[1].
    env = {key: value for key, value in os.environ.items() if key not in ("MAKELEVEL", "MAKEFLAGS", "VIRTUAL_ENV")}
    env["DOCKER_HOST"] = "unix:///nonexistent/docker.sock"
    venv_s = timed(["make", "venv"], clone, env)
    demo_s = timed(["make", "demo"], clone, env)
    documents = [json.loads(path.read_text()) for path in (clone / "results").rglob("*.json")]
    locks = {document["environment"].get("lock_sha256") for document in documents if "environment" in document}
    shutil.rmtree(clone)  # each clone holds a venv of several GB
    return venv_s, demo_s, locks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="84b3070", help="a revision whose make venv installs unlocked pins")
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    revisions = [
        subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for rev in (args.before, args.after)
    ]
    seen: dict[str, list[tuple[float, float, set]]] = {rev: [] for rev in revisions}
    with tempfile.TemporaryDirectory(prefix="fresh-demo-") as scratch:
        for _ in range(args.rounds):
            for rev in revisions:
                seen[rev].append(fresh_demo(rev, Path(scratch)))
    print(f"{'revision':<14}{'venv s':>9}{'demo s':>9}{'total s':>9}{'/ goal':>8}  lock_sha256 in the demo's results")
    for label, rev in zip(("before", "after"), revisions):
        for venv_s, demo_s, locks in seen[rev]:
            total = venv_s + demo_s
            shown = ", ".join(sorted(str(lock)[:12] for lock in locks)) or "(no results)"
            print(f"{label} {rev[:7]:<7}{venv_s:>9.1f}{demo_s:>9.1f}{total:>9.1f}{total / GOAL_S:>8.2f}  {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

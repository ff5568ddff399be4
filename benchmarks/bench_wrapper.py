"""The run wrapper's cost: a 5 s command recorded by envkit_run.py against the same command bare, side by side.

Issue 32 §6's figure: the recorded wall time (the record's run.wall_time_s) over the bare command's wall time,
the median of interleaved pairs (goal <= 1.02, or within 50 ms). Beside it, the whole wrapped process over the
bare one: what a user waits for, the wrapper's start-up and its record (environment, distributions, git, the
device hook's report) included. The command does a fixed amount of work (calibrated once to about 5 s here),
so a wrapper that slowed the program would show (CPU seconds are printed beside: on a loaded machine wall time
mostly measures the other processes); it runs from a git repository's root, as a project's runs do,
with the interpreter given (default: this one; --torch imports torch first, as a training script does).
Pairs alternate which of the two runs first, so a machine that drifts moves both alike. --in-image runs the
wrapper as an image does (ENVKIT_CONTAINER_PROJECT: the folder stands for /workspace/project), and the program
saves a 64 MiB checkpoint beside itself, which the wrapper copies into the run's folder: the walks before and after
and the copy are in the wrapped process's time, not in the recorded wall time.

usage: python benchmarks/bench_wrapper.py [--pairs 5] [--seconds 5] [--python PYTHON] [--torch] [--in-image]
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from envkit.support import provenance_files  # noqa: E402 - the repository's own package, run as a script

REPO = Path(__file__).resolve().parent.parent
WRAPPER = REPO / "envkit" / "support" / "provenance.py"
GOAL_RATIO = 1.02
GOAL_SLACK_S = 0.05
# Fixed work: N rounds of integer arithmetic; a wrapper cannot make it shorter, only start it later or slower.
PROGRAM = """import sys
{imports}
total = 0
for number in range(int(sys.argv[1])):
    total = (total * 31 + number) % 1000003
print("Accuracy: 170/300 (57%)", total)
{saves}
"""
SAVES = 'open("snapshot.pt", "wb").write(bytes(64 * 2**20))'  # --in-image: a checkpoint beside the script


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def calibrate(python: str, seconds: float, folder: Path) -> int:
    """Rounds of PROGRAM's loop that take about ``seconds`` of CPU with ``python`` (CPU: wall time on a loaded
    machine says more about the other processes than about this loop)."""
    probe = 2_000_000
    cpu = _cpu()
    subprocess.run([python, "program.py", str(probe)], cwd=folder, check=True, capture_output=True)
    return max(1, int(probe * seconds / max(_cpu() - cpu, 0.01)))


def bare(python: str, rounds: int, folder: Path) -> tuple[float, float]:
    """The bare command's wall and CPU seconds."""
    cpu, started = _cpu(), time.perf_counter()
    subprocess.run([python, "program.py", str(rounds)], cwd=folder, check=True, capture_output=True)
    return time.perf_counter() - started, _cpu() - cpu


def wrapped(python: str, rounds: int, folder: Path, results: Path, in_image: bool) -> tuple[float, float, float]:
    """The wrapped process's wall time from outside, the wall time its record says, and its CPU seconds."""
    env = {**os.environ, "ENVKIT_RESULTS_DIR": str(results), "ENVKIT_EXPERIMENT": "bench"}
    env.pop(provenance_files.PROJECT_VARIABLE, None)
    if in_image:
        env[provenance_files.PROJECT_VARIABLE] = str(folder)
    cpu, started = _cpu(), time.perf_counter()
    subprocess.run(
        [python, str(WRAPPER), python, "program.py", str(rounds)], cwd=folder, env=env, check=True, capture_output=True
    )
    whole, cpu = time.perf_counter() - started, _cpu() - cpu
    (record,) = results.glob("*.json")
    run = json.loads(record.read_text(encoding="utf-8"))["run"]
    recorded = run["wall_time_s"]
    if in_image:
        assert [entry["path"] for entry in run["project_files"]["copied"]] == ["snapshot.pt"], run["project_files"]
    for path in sorted(results.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    return whole, recorded, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs the command")
    parser.add_argument("--torch", action="store_true", help="the command imports torch first")
    parser.add_argument("--in-image", action="store_true", help="run the wrapper as an image does; a checkpoint")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        saves = SAVES if args.in_image else ""
        (folder / "program.py").write_text(PROGRAM.format(imports="import torch" if args.torch else "", saves=saves))
        subprocess.run(["git", "init", "-q", folder], check=True)
        subprocess.run(
            ["git", "-c", "user.name=b", "-c", "user.email=b@example.com", "commit", "-q", "--allow-empty", "-m", "b"],
            cwd=folder,
            check=True,
        )
        rounds = calibrate(args.python, args.seconds, folder)
        rows = []
        for pair in range(args.pairs):
            if pair % 2:
                whole, recorded, cpu = wrapped(args.python, rounds, folder, folder / "results", args.in_image)
                plain, plain_cpu = bare(args.python, rounds, folder)
            else:
                plain, plain_cpu = bare(args.python, rounds, folder)
                whole, recorded, cpu = wrapped(args.python, rounds, folder, folder / "results", args.in_image)
            rows.append((plain, recorded, whole, cpu - plain_cpu))
            print(
                f"pair {pair + 1}: bare {plain:.3f} s  recorded {recorded:.3f} s  wrapped process {whole:.3f} s  "
                f"CPU: bare {plain_cpu:.3f} s, wrapped {cpu:.3f} s"
            )
    recorded_ratio = statistics.median(recorded / plain for plain, recorded, _, _ in rows)
    whole_ratio = statistics.median(whole / plain for plain, _, whole, _ in rows)
    overhead = statistics.median(whole - plain for plain, _, whole, _ in rows)
    cpu_overhead = statistics.median(extra for *_, extra in rows)
    bare_median = statistics.median(plain for plain, *_ in rows)
    met = recorded_ratio <= GOAL_RATIO or abs(recorded_ratio - 1) * bare_median <= GOAL_SLACK_S
    print(
        f"bare command: median {bare_median:.3f} s over {args.pairs} pairs ({args.python}, torch: {args.torch}, "
        f"in an image: {args.in_image})"
    )
    print(
        f"recorded wall / bare wall: median {recorded_ratio:.4f} (goal <= {GOAL_RATIO} or within 50 ms: "
        f"{'met' if met else 'NOT met'})"
    )
    print(
        f"wrapped process / bare process: median {whole_ratio:.4f} (the wrapper's own start and record: "
        f"median {overhead * 1000:.0f} ms)"
    )
    print(
        f"the wrapper's CPU time beyond the bare command's: median {cpu_overhead * 1000:.0f} ms "
        "(steady where wall time follows the machine's load)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

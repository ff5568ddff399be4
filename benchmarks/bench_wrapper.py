"""The run wrapper's cost as a user waits for it: the whole `envkit experiment NAME --python PY` command against the
same command run bare, in interleaved pairs.

Issue 42's figure: the wrapped command over the bare one, a ratio per pair for wall time and for CPU time (the
children's user + system seconds: steadier than wall time on a shared machine), each printed as min / median / max
(goal: median <= 1.02 on a 5 s command). It is the whole command: envkit's CLI, its plan, the wrapper's start-up,
the program and the record. The command does a fixed amount of work (calibrated once to about --seconds of CPU
here), so a wrapper that slowed the program would show. The project is a git repository with one command
experiment, as `envkit init` writes for a user's script. Pairs alternate which of the two runs first, so a machine
that drifts moves both alike.

A verdict is printed only where the noise allows one: the noise is the bare command's own spread over its runs
(max - min over median). A median below 1 by more than that noise is impossible for a wrapper (it only adds
work): the machine's load changed between runs, and no verdict is printed; "goal met" needs the median within the
goal by more than the noise, "NOT met" beyond it by more; anything between is "not shown either way". Beside it,
the fixed cost (wrapped minus bare, per pair: the wrapper adds work around the program, not to it) is held to the
goal's budget, 2% of a 5 s command (100 ms), with a distribution-free 95% interval of its median; --seconds 0 (a
near-empty program) measures it closely, where a 5 s program's own spread hides it. --in-image runs the wrapper alone, as
an image's run.sh does (no envkit CLI there), with a 64 MiB checkpoint beside the program that it copies.

usage: python benchmarks/bench_wrapper.py [--pairs 9] [--seconds 5] [--python PYTHON] [--torch] [--in-image]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from intervals import against, median_interval  # noqa: E402 - beside this script

from envkit.support import provenance_files  # noqa: E402 - the repository's own package, run as a script

REPO = Path(__file__).resolve().parent.parent
WRAPPER = REPO / "envkit" / "support" / "provenance.py"
GOAL_RATIO = 1.02
# The goal's command: 5 s of work, of which the wrapper may add 2%. The wrapper's cost is fixed (it starts the
# program and records it; the program itself is not slowed), so a near-empty command (--seconds 0) measures it
# closely, against this budget.
GOAL_SECONDS = 5.0
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
CONFIG = """targets:
  cpu: {{kind: cpu, torch: "2.9.0", python: "3.11"}}
experiments:
  bench:
    summary: a fixed amount of arithmetic
    kind: cpu
    command: [python, program.py, "{rounds}"]
"""
GIT = ["git", "-c", "user.name=b", "-c", "user.email=b@example.com", "-c", "commit.gpgsign=false"]


def timed(argv: list[str], folder: Path, env: dict | None = None) -> tuple[float, float]:
    """Wall and CPU seconds (user + system of every child) of one whole command."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(argv, cwd=folder, env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - started, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def calibrate(python: str, seconds: float, folder: Path) -> int:
    """Rounds of PROGRAM's loop that take about ``seconds`` of CPU with ``python``."""
    probe = 2_000_000
    _, cpu = timed([python, "program.py", str(probe)], folder)
    return max(1, int(probe * seconds / max(cpu, 0.01)))


def project(folder: Path, rounds: int, args: argparse.Namespace) -> None:
    saves = SAVES if args.in_image else ""
    (folder / "program.py").write_text(PROGRAM.format(imports="import torch" if args.torch else "", saves=saves))
    (folder / "envkit.yaml").write_text(CONFIG.format(rounds=rounds))
    (folder / ".gitignore").write_text("results/\nsnapshot.pt\n")
    subprocess.run([*GIT, "init", "-q"], cwd=folder, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=folder, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", "bench"], cwd=folder, check=True)


def wrapped_command(args: argparse.Namespace, rounds: int, folder: Path) -> tuple[list[str], dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(provenance_files.PROJECT_VARIABLE, None)
    results = str(folder / "results")
    if args.in_image:
        env.update({provenance_files.PROJECT_VARIABLE: str(folder), "ENVKIT_RESULTS_DIR": results})
        env["ENVKIT_EXPERIMENT"] = "bench"
        return [args.python, str(WRAPPER), args.python, "program.py", str(rounds)], env
    envkit = [sys.executable, "-m", "envkit", "experiment", "bench", "--python", args.python, "--results-dir", results]
    return envkit, env


def spread(values: list[float]) -> str:
    return f"min {min(values):.4f}  median {statistics.median(values):.4f}  max {max(values):.4f}"


def verdict(ratios: list[float], bare: list[float]) -> str:
    """What the pairs support: met, not met, or no verdict where the bare command's own noise is wider."""
    median, noise = statistics.median(ratios), (max(bare) - min(bare)) / statistics.median(bare)
    said = f"(noise: the bare command's own spread over its runs, {noise:.1%})"
    if median < 1 - noise:
        return f"no verdict: below 1 by more than the noise {said}, which a wrapper cannot be; the load changed"
    if median > GOAL_RATIO + noise:
        return f"goal NOT met (> {GOAL_RATIO} beyond the noise) {said}"
    if median + noise <= GOAL_RATIO:
        return f"goal met (<= {GOAL_RATIO} by more than the noise) {said}"
    return f"not shown either way: the noise is wider than the goal's margin {said}"


def fixed_cost_verdict(extras: list[float]) -> str:
    """The wrapper's fixed cost (wrapped minus bare, per pair) against 2% of the goal's 5 s command."""
    budget = (GOAL_RATIO - 1) * GOAL_SECONDS
    low, high = interval = median_interval(extras)
    said = f"the median's 95% interval {low * 1000:.0f}-{high * 1000:.0f} ms, budget {budget * 1000:.0f} ms"
    return f"{against(budget, interval)} for a {GOAL_SECONDS:g} s command ({said})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs the command")
    parser.add_argument("--torch", action="store_true", help="the command imports torch first")
    parser.add_argument("--in-image", action="store_true", help="the wrapper alone, as run.sh runs it; a checkpoint")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        project(folder, 0, args)
        rounds = calibrate(args.python, args.seconds, folder)
        project(folder, rounds, args)  # commit the calibrated command: the record's git state stays clean
        wrapped, env = wrapped_command(args, rounds, folder)
        bare_argv = [args.python, "program.py", str(rounds)]
        rows = []
        for pair in range(args.pairs):
            order = [(bare_argv, None), (wrapped, env)][:: -1 if pair % 2 else 1]
            measured = {id(argv): timed(argv, folder, command_env) for argv, command_env in order}
            rows.append((measured[id(bare_argv)], measured[id(wrapped)]))
            (plain, plain_cpu), (whole, cpu) = rows[-1]
            print(
                f"pair {pair + 1}: wall bare {plain:.3f} s, wrapped {whole:.3f} s; CPU bare {plain_cpu:.3f} s, "
                f"wrapped {cpu:.3f} s"
            )
    what = "the wrapper alone (as in an image)" if args.in_image else "envkit experiment --python"
    print(f"{what} against the bare command, {args.pairs} interleaved pairs ({args.python}, torch: {args.torch})")
    for index, figure in enumerate(("wall", "CPU")):
        bare = [row[0][index] for row in rows]
        ratios = [row[1][index] / row[0][index] for row in rows]
        extras = [row[1][index] - row[0][index] for row in rows]
        print(
            f"{figure} ratio wrapped / bare: {spread(ratios)}; median extra {statistics.median(extras) * 1000:.0f} ms; "
            f"bare {statistics.median(bare):.3f} s"
        )
        print(f"  {figure}, this command: {verdict(ratios, bare)}")
        print(f"  {figure}, the fixed cost: {fixed_cost_verdict(extras)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

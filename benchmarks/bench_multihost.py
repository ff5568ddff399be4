"""Two hosts against one, and the Slurm round trip (issue 15's figures), on this machine's namespace hosts.

    .venv/bin/python benchmarks/bench_multihost.py               # as root; ~3 min on 2 cores
    .venv/bin/python benchmarks/bench_multihost.py --epochs 5 --jobs 5

Part 1 trains recipes/cifar.py with DDP over gloo on tiny CIFAR-10 files, same
global batch and data both times: two processes on one host (torchrun
--standalone), then one process on each of two hosts (network namespaces joined
by a bridge, c10d rendezvous on node1). Both run on the same cores, so the
difference is what crossing hosts costs here (veth and bridge instead of
loopback), not what two real machines would gain.

Part 2 starts a two-node Slurm cluster (munged, slurmctld, slurmd) and times
``sbatch --wait`` from submission to exit: an empty two-node job (``srun true``,
Slurm's own overhead), and the sbatch script ``envkit launch cpu-ddp-cifar --on
slurm`` renders (one epoch) next to the time the recipe itself reports. Both include sbatch's polling for the end: after 2 s,
then every 8 s on this cluster (MinJobAge=16, see slurm-cluster.sh); on a cluster
with the default MinJobAge the steps grow to 32 s.
Prints figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))
from cifar_files import write_cifar10  # noqa: E402
from multihost import (  # noqa: E402
    CIFAR_RECIPE,
    SLURM_TOOLS,
    missing,
    namespace_hosts,
    slurm_cluster,
    slurm_job_script,
    torchrun_on_hosts,
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=3, help="epochs per training run (default: 3)")
    parser.add_argument("--image-size", type=int, default=64, help="image side in pixels (default: 64)")
    parser.add_argument(
        "--global-batch", type=int, default=32, help="images per step over both processes (default: 32)"
    )
    parser.add_argument(
        "--train-per-batch", type=int, default=128, help="images in each of the 5 training files (default: 128)"
    )
    parser.add_argument("--jobs", type=int, default=3, help="empty Slurm jobs to time (default: 3)")
    return parser.parse_args()


def epoch_seconds(results_dir: Path) -> tuple[float, float, int]:
    (path,) = results_dir.glob("cifar-*.json")
    timing = json.loads(path.read_text())["timing"]["epoch_s"]
    return timing["mean"], timing["std"], timing["n"]


def one_host(args_list: list[str], workdir: Path) -> Path:
    results = workdir / "one-host"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, str(CIFAR_RECIPE), *args_list, "--nproc", "2", "--results-dir", str(results)],
        check=True,
        capture_output=True,
        cwd=workdir,
        env=env,
        timeout=1800,
    )
    return results


def two_hosts(args_list: list[str], workdir: Path) -> Path:
    results = workdir / "two-hosts"
    with namespace_hosts(workdir / "hosts") as hosts:
        ranks = torchrun_on_hosts(
            hosts, CIFAR_RECIPE, [*args_list, "--results-dir", str(results)], cwd=workdir, timeout=1800
        )
    for node, done in zip(hosts.nodes, ranks):
        if done.returncode != 0:
            raise SystemExit(f"bench_multihost: the two-host run failed on {node}: {done.stderr.strip()[-2000:]}")
    return results


def slurm_round_trips(args_list: list[str], workdir: Path, jobs: int) -> None:
    with slurm_cluster(workdir / "cluster") as cluster:
        empty = "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\nsrun true\n"
        seconds = []
        for index in range(jobs):
            start = time.perf_counter()
            returncode, _, _ = cluster.sbatch_wait(empty, workdir / f"empty-{index}")
            seconds.append(time.perf_counter() - start)
            if returncode != 0:
                raise SystemExit(f"bench_multihost: the empty Slurm job failed with exit code {returncode}")
        print(
            f"slurm round trip, empty 2-node job (srun true), submit -> exit: median {statistics.median(seconds):.2f} s "
            f"over {jobs} (min {min(seconds):.2f}, max {max(seconds):.2f})"
        )

        script = slurm_job_script(
            2, [*args_list, "--epochs", "1"], workdir / "data", workdir / "ddp" / "results", workdir / "ddp"
        )
        start = time.perf_counter()
        returncode, _, output = cluster.sbatch_wait(script, workdir / "ddp", timeout=1800)
        round_trip = time.perf_counter() - start
        if returncode != 0:
            raise SystemExit(f"bench_multihost: the Slurm DDP job failed with exit code {returncode}: {output[-2000:]}")
        (path,) = (workdir / "ddp" / "results").glob("cifar-*.json")
        recipe_total = json.loads(path.read_text())["timing"]["total_s"]
        print(
            f"slurm round trip, DDP job (1 epoch, srun torchrun on 2 nodes), submit -> exit: {round_trip:.2f} s; "
            f"the recipe's own total: {recipe_total:.2f} s (the rest: Slurm, torchrun, Python start, sbatch polling)"
        )


def main() -> None:
    args = parse_args()
    reason = missing(SLURM_TOOLS)
    if reason is not None:
        raise SystemExit(f"bench_multihost: cannot make hosts here: {reason}")
    with tempfile.TemporaryDirectory(prefix="bench-multihost-") as temp:
        workdir = Path(temp)
        write_cifar10(workdir / "data", train_per_batch=args.train_per_batch, test_size=64)
        # envkit launch's Slurm job names the data directory and the experiment's own --parallel ddp itself.
        training = [
            "--image-size",
            str(args.image_size),
            "--global-batch",
            str(args.global_batch),
            "--epochs",
            str(args.epochs),
            "--lr",
            "0.02",
            "--quiet",
            "--dataset",
            "real",
            "--data-check",
            "exists",
            "--no-download",
        ]
        local = [*training, "--data-dir", str(workdir / "data"), "--parallel", "ddp"]
        print(
            f"cifar.py mobilenet_v2, {args.image_size} px, DDP over gloo, global batch {args.global_batch}, "
            f"{5 * args.train_per_batch} training images, {args.epochs} epochs, 1 thread per process, {os.cpu_count()} cores"
        )
        for label, run in (("one host, 2 processes  ", one_host), ("two hosts, 1 process each", two_hosts)):
            mean, std, count = epoch_seconds(run(local, workdir))
            print(f"  {label}: {mean:.2f} s/epoch (std {std:.2f}, {count} epochs)")
        slurm_round_trips(training, workdir, args.jobs)


if __name__ == "__main__":
    main()

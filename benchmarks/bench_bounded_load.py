"""What the caps of envkit/support/bounded_load.py cost and what they save, side by side.

Prints, for envkit's largest table (envkit/data/matrix.yaml) and the config, the time to load
it with the bounded loader beside PyYAML's C loader (yaml.CSafeLoader), and for each hostile
input (an alias bomb of 9 anchors, 100,000 nested lists, a 100 MB file) the CPU time and peak
memory of `envkit targets` refusing it, each in its own process under a 2 GiB address-space
limit. Figures only: nothing is asserted (tests/support/test_bounded_load.py checks the refusals).

usage: python benchmarks/bench_bounded_load.py [--repeat N]
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

REPO = Path(__file__).resolve().parent.parent
CONFIG = 'targets:\n  cpu: {kind: cpu, torch: "2.9.0"}\n'
LIMIT = 2 * 2**30


def per_load_ms(load, text: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        load(text)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def hostile_files(directory: Path) -> dict[str, Path]:
    bomb = [f"l0: &l0 [{', '.join(['x'] * 9)}]"]
    bomb += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, 9)]
    files = {
        "alias bomb (9 anchors, 9**9 values)": CONFIG + "\n".join(bomb) + "\n",
        "100,000 nested lists": CONFIG + "deep: " + "[" * 100_000 + "]" * 100_000 + "\n",
    }
    paths = {}
    for name, text in files.items():
        paths[name] = directory / f"{len(paths)}.yaml"
        paths[name].write_text(text)
    big = directory / "big.yaml"
    with big.open("w") as stream:
        stream.write(CONFIG)
        for _ in range(100):
            stream.write("#" * 2**20)
    paths["100 MB file"] = big
    return paths


def refuse(config: Path) -> tuple[int, float, float, str]:
    """(exit status, CPU seconds, peak RSS in MiB, last stderr line) of `envkit targets --config`."""

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        [sys.executable, "-m", "envkit", "targets", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit,
    ) as child:
        stderr = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    return (
        child.returncode,
        usage.ru_utime + usage.ru_stime,
        usage.ru_maxrss / 1024,
        (stderr.strip().splitlines() or [""])[-1],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    import yaml

    from envkit.support.bounded_load import parse_yaml

    for path in (REPO / "envkit" / "data" / "matrix.yaml", REPO / "envkit.yaml"):
        text = path.read_text()
        bounded = per_load_ms(parse_yaml, text, args.repeat)
        c_loader = per_load_ms(lambda t: yaml.load(t, Loader=yaml.CSafeLoader), text, args.repeat)
        print(
            f"{path.relative_to(REPO)}: bounded {bounded:.3f} ms, yaml.CSafeLoader {c_loader:.3f} ms per load "
            f"(+{bounded - c_loader:.3f} ms)"
        )
    with tempfile.TemporaryDirectory() as scratch:
        for name, path in hostile_files(Path(scratch)).items():
            code, cpu, rss, line = refuse(path)
            print(f"{name:38} exit {code}  cpu {cpu * 1000:6.0f} ms  peak RSS {rss:6.1f} MiB  {line[:90]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`envkit report DIR --html` on a results directory of 5,000 files, beside the same report without the page.

The files are command runs as the run wrapper writes them: 40 experiments on 5 places each, 25 runs per
place, each with two recorded series of 200 steps and 60 distributions (one place's lock differs). Prints
the wall time of `envkit report` with and without --html (median of --repeat runs, each in its own process),
their ratio, then in one process where the time goes (reading the files, grouping them, the page's data, the
page itself), the page's size and how many figures it drew (figures are bounded: see envkit/runs/figures.py
and html_page.py). Issue 34 asks for the page in 10 s or less. Figures only: nothing is asserted.

usage: python benchmarks/bench_html_page.py [--repeat N] [--files N]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_environment import environment

REPO = Path(__file__).resolve().parent.parent
PLACES = (("cpu", "envkit-cpu:latest"), ("cuda", "envkit-cuda:latest"), ("cuda", "envkit-cuda:v2"),
          ("tpu", "envkit-tpu-vm:latest"), ("cpu", "envkit-cpu:v2"))  # fmt: skip
STEPS = 200


def write_results(directory: Path, files: int) -> None:
    per_place = max(1, files // (40 * len(PLACES)))
    number = 0
    for experiment in range(40):
        for place, (device, image) in enumerate(PLACES):
            for run in range(per_place):
                number += 1
                rate = 0.02 * (1 + place) * (1 + run % 3 / 10)
                steps = list(range(STEPS))
                distributions = sorted(f"package{i}==1.{i}.{place if i < 3 else 0}" for i in range(60))
                document = {
                    "schema_version": 3,
                    "run_name": f"e{experiment}-p{place}-{run}",
                    "run": {
                        "record_version": 1,
                        "experiment": f"train{experiment:02d}",
                        "argv": ["python", "train.py"],
                        "exit_status": 1 if run == per_place - 1 else 0,
                        "started_at": "2026-11-26T00:00:00+00:00",
                        "wall_time_s": 30.0 / (1 + place) + run % 5,
                    },
                    "metrics": {"acc": 0.9, "loss": 0.2},
                    "series": {
                        "acc": {"step": steps, "value": [round(1 - math.exp(-rate * s), 5) for s in steps]},
                        "loss": {"step": steps, "value": [round(2 * math.exp(-rate * s), 5) for s in steps]},
                    },
                    "environment": environment(
                        device,
                        image,
                        f"{place % 2}" * 64,
                        distributions,
                        torch="2.13.0",
                        git_revision="0123456789abcdef",
                    ),
                }
                (directory / f"{document['run_name']}.json").write_text(json.dumps(document))
    print(f"{number} results files in {directory}")


def timed(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def breakdown(results: Path) -> dict[str, tuple[float, float]]:
    """Wall and CPU seconds per step, in this process (CPU time reads truer on a shared machine)."""
    from envkit.runs.html_page import render_page
    from envkit.runs.page_adapter import page_from_report
    from envkit.runs.report import build_report
    from envkit.runs.results import load_results

    steps, clocks = {}, (time.perf_counter(), time.process_time())

    def lap(name: str) -> None:
        nonlocal clocks
        now = (time.perf_counter(), time.process_time())
        steps[name] = (now[0] - clocks[0], now[1] - clocks[1])
        clocks = now

    runs, warnings = load_results(results)
    lap("load")
    report = build_report(runs, config=REPO / "envkit.yaml")
    lap("report")
    page = page_from_report(report, warnings)
    lap("page data")
    render_page(page)
    lap("page")
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--files", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        results, page = Path(folder) / "results", Path(folder) / "page.html"
        results.mkdir()
        write_results(results, args.files)
        report = [sys.executable, "-m", "envkit", "report", str(results), "--config", str(REPO / "envkit.yaml")]
        alone = timed(report, args.repeat)
        with_page = timed([*report, "--html", str(page)], args.repeat)
        steps = breakdown(results)
        print("in one process (wall / CPU s): " + ", ".join(f"{k} {w:.2f} / {c:.2f}" for k, (w, c) in steps.items()))
        text = page.read_text(encoding="utf-8")
        print(f"envkit report:          {alone:6.2f} s")
        print(f"envkit report --html:   {with_page:6.2f} s ({with_page / alone:.2f}x the report alone; target 10 s)")
        print(
            f"page: {len(text.encode()) / 1e6:.2f} MB, {text.count('<figure')} figures, {text.count('<table')} tables"
        )


if __name__ == "__main__":
    main()

"""How long `envkit demo` takes on this machine without Docker, step by step, against its target.

    .venv/bin/python benchmarks/bench_demo.py            # the demo's own plan, in a scratch copy of the project

Issue 6 promises the CPU-only demo (render; MNIST on eager CPU; CIFAR one process vs
DDP over 2 gloo processes; report and plot) "in a few minutes": the target here is
300 s. The steps run exactly as `envkit demo --no-docker` runs them, in a copy of
envkit.yaml, templates/, recipes/, docker/ and notebooks/, so the checkout's docker/ and results/ stay
untouched. Printed: seconds per step, the total, total / target, and the demo's own
DDP-vs-one-process speed-up from its report (measured in the same run).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from envkit.host.doctor import HostFacts  # noqa: E402
from envkit.runs.plans import RunPlan, demo_plan  # noqa: E402
from envkit.runs.run_steps import execute  # noqa: E402

TARGET_S = 300.0


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="envkit-bench-demo-") as scratch:
        project = Path(scratch)
        shutil.copy(ROOT / "envkit.yaml", project / "envkit.yaml")
        for part in ("templates", "recipes", "docker", "notebooks"):  # as a clone has them: notebooks need their locks
            shutil.copytree(ROOT / part, project / part)
        config = project / "envkit.yaml"
        results = project / "results" / "demo"
        plan = demo_plan(results, config=config, facts=HostFacts(docker_error="benchmark: no Docker"), use_docker=False)
        timings = []
        for step in plan.steps:
            started = time.perf_counter()
            ok = execute(RunPlan([step]), dry_run=False)
            timings.append((step.title, time.perf_counter() - started, ok))
        table = subprocess.run(
            [sys.executable, "-m", "envkit", "report", str(results), "--format", "json"],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        rows = json.loads(table.stdout)["rows"] if table.returncode == 0 else []

    total = sum(seconds for _, seconds, _ in timings)
    print(f"{'step':<40} {'seconds':>8}  ok")
    for title, seconds, ok in timings:
        print(f"{title:<40} {seconds:>8.1f}  {'yes' if ok else 'NO'}")
    print(f"{'total':<40} {total:>8.1f}")
    print(
        f"total / target ({TARGET_S:.0f} s): {total / TARGET_S:.2f}  ({'within' if total <= TARGET_S else 'OVER'} target)"
    )
    for row in rows:
        if row["recipe"] == "cifar" and row["parallel"] == "ddp":
            print(f"cifar DDP×{row['world_size']} vs one process, train s/epoch speed-up: {row['speedup']:.2f}×")
    return 0 if all(ok for _, _, ok in timings) else 1


if __name__ == "__main__":
    sys.exit(main())

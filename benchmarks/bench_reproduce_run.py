"""`envkit reproduce`'s time against the run it reproduces (issue 43's figures), paired and interleaved in one run:
each round runs the experiment directly (run.sh in the image by its digest, as `envkit experiment` runs it), then
reproduces it from the page with the image pulled by its digest (pull + run + report), then from a record of an
unpushed image, rebuilt from the lock with no build cache as a collaborator's machine has none (rebuild + run +
report). Also what the page's reproduction data adds to its size.

    .venv/bin/python benchmarks/bench_reproduce_run.py --base-image "$(scripts/base-image.sh)" [--rounds 3]

The project is the engine tests' locked offline cpu project (tests/docker_engine.py), a git repository, pushed to
Debian's docker-registry on 127.0.0.1; the run is five MNIST steps on generated data. It builds and tags
envkit-cpu images as `envkit build cpu` does, and removes the ones it made. Needs a running Docker engine and
docker-registry; prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "benchmarks")]

import bench_reproduce  # noqa: E402
import pytest  # noqa: E402  (the engine tests' helpers say what is missing by pytest's outcomes)
from docker_engine import MNIST_SMOKE, envkit, locked_project, served_registry  # noqa: E402

VARIANTS = ("direct run", "reproduce: pull + run + report", "reproduce: rebuild + run + report")


def timed(
    command: list[str], cwd: Path, env: dict | None = None, allowed: tuple[int, ...] = (0,)
) -> tuple[float, float]:
    """Wall and CPU seconds (bench_reproduce.timed's) of a command that must end with an ``allowed`` status (a
    reproduction whose verdict differs exits 1: its time is the figure all the same)."""
    done, wall, cpu = bench_reproduce.timed(command, cwd, env)
    if done.returncode not in allowed:
        sys.exit(f"bench_reproduce_run: {' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, cpu


def git(*args: str, cwd: Path) -> None:
    identity = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid"}
    identity |= {"GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.invalid"}
    subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **identity}, check=True, capture_output=True)


def remove(client, *references: str) -> None:
    """The images ``references`` name, whole (by ID: removing a reference alone would keep the layers, and a pull
    of them would cost nothing)."""
    from envkit.support.docker_client import docker_sdk

    for reference in references:
        try:
            client.images.remove(client.images.get(reference).id, force=True)
        except docker_sdk().errors.ImageNotFound:  # gone already, with another of its tags
            pass


def data_bytes(page: Path) -> int:
    """The bytes of the page's reproduction data: its one <data> element (envkit.runs.page_records)."""
    found = re.search(r'<data id="envkit-reproduce"[^>]*>', page.read_text(encoding="utf-8"))
    return len(found.group(0).encode()) if found else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-image", required=True, help="the base to build on (scripts/base-image.sh makes one)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the three (default 3)")
    args = parser.parse_args()
    from envkit.support.docker_client import connect_docker

    client = connect_docker()
    with tempfile.TemporaryDirectory(prefix="envkit-bench-") as tmp:
        root = Path(tmp)
        project, wheels = locked_project(root / "locked")
        (project / ".gitignore").write_text("results/\n")
        (project / "recipes" / "bench.txt").write_text(f"{uuid.uuid4()}\n")  # its own content tag: no reuse
        git("init", "-q", cwd=project)
        git("add", "-A", cwd=project)
        git("commit", "-q", "-m", "the project", cwd=project)
        # No build cache: its layers are its own, as on the first user's machine; an image of the same layers left
        # by an earlier build would make the pull below fetch nothing.
        flags = ("--config", "envkit.yaml", "--base-image", args.base_image, "--wheelhouse", str(wheels), "--no-cache")
        built = envkit("build", "cpu", *flags, cwd=project).stdout.strip()

        def direct(folder: str, image: str) -> tuple[float, float]:
            env = {**os.environ, "IMAGE": image, "ENVKIT_EXPERIMENT": "cpu-mnist", "RESULTS_DIR": str(root / folder)}
            return timed(["docker/cpu/run.sh", *MNIST_SMOKE], project, env)

        direct("unpushed", built)  # a record of an image no push names (yet): reproduced by a rebuild
        (root / "registry").mkdir()
        with served_registry(root / "registry") as registry:
            pushed = envkit("push", "cpu", "--config", "envkit.yaml", "--registry", f"{registry}/bench", cwd=project)
            by_digest = pushed.stdout.split()[-1]
            direct("shared", by_digest)
            envkit(
                "report",
                str(root / "shared"),
                "--html",
                str(root / "page.html"),
                "--config",
                "envkit.yaml",
                cwd=project,
            )
            [record] = (root / "unpushed").glob("*.json")
            second = root / "second"
            subprocess.run(["git", "clone", "-q", str(project), str(second)], check=True)
            reproduce = [sys.executable, "-m", "envkit", "reproduce", "--config", "envkit.yaml"]
            rebuild = ["--no-cache", "--wheelhouse", str(wheels), "--base-image", args.base_image]
            figures: dict[str, list[tuple[float, float]]] = {variant: [] for variant in VARIANTS}
            for number in range(args.rounds):
                figures[VARIANTS[0]].append(direct(f"direct-{number}", by_digest))
                remove(client, by_digest)
                assert not client.images.list(filters={"reference": by_digest.split("@")[0]}), "the image is still here"
                out = ["--results-dir", str(root / f"pulled-{number}")]
                figures[VARIANTS[1]].append(timed([*reproduce, str(root / "page.html"), *out], second, None, (0, 1)))
                out = ["--results-dir", str(root / f"rebuilt-{number}")]
                figures[VARIANTS[2]].append(timed([*reproduce, str(record), *rebuild, *out], second, None, (0, 1)))
        page = root / "page.html"
        print(f"configuration  the locked offline cpu project, {' '.join(MNIST_SMOKE)}; {args.rounds} rounds")
        print("CPU            this side's processes (envkit, git, the docker client), not the container's or dockerd's")
        base_wall = statistics.median(wall for wall, _ in figures[VARIANTS[0]])
        for variant in VARIANTS:
            walls = [wall for wall, _ in figures[variant]]
            cpus = [cpu for _, cpu in figures[variant]]
            spread = f"{min(walls):.1f}-{max(walls):.1f} s"
            print(
                f"{variant:36} wall median {statistics.median(walls):6.1f} s ({spread}), CPU median "
                f"{statistics.median(cpus):6.1f} s; {statistics.median(walls) / base_wall:5.1f}x the direct run's wall"
            )
        size, data = page.stat().st_size, data_bytes(page)
        print(f"page           {size / 1e3:.1f} KB for one run, of which its reproduction data {data / 1e3:.1f} KB")
        remove(client, built, "envkit-cpu:latest")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except (pytest.skip.Exception, pytest.fail.Exception) as exc:
        sys.exit(f"bench_reproduce_run: {exc}")

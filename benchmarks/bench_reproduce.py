"""Reproducibility figures, side by side in one run: a cold build on each builder (the Docker
engine, buildah), two buildah builds with their digests, `envkit verify` on each builder's
image, `envkit diff` between the two 1.06 GB images (with this checkout's envkit and,
given --before REV, with the envkit of revision REV), and each target's image size.

    .venv/bin/python benchmarks/bench_reproduce.py --base-image "$(scripts/base-image.sh)" [--before REV]

The configuration is the locked offline cpu project (benchmarks/offline_lock.py: torch from
ENVKIT_TEST_WHEELS, the rest from the default index, the wheelhouse filled from the lock),
under its own target name, so that no envkit-cpu image of the user's is touched. The
buildah times include moving the image into the Docker engine. Needs a running Docker
engine and buildah; prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
TARGET = "bench-cpu"
DIGEST = re.compile(r", digest (sha256:[0-9a-f]{64})\)$")


def timed(command: list[str], cwd: Path, env: dict | None = None) -> tuple[subprocess.CompletedProcess, float, float]:
    """The finished command, its wall seconds and its CPU seconds (user + system, children included)."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def envkit(project: Path, *args: str, check: bool = True, pythonpath: Path = REPO):
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    done, wall, cpu = timed([sys.executable, "-m", "envkit", *args], project, env)
    if check and done.returncode != 0:
        sys.exit(f"bench_reproduce: envkit {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done, wall, cpu


def locked_project(root: Path) -> tuple[Path, Path]:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from offline_lock import (
        OFFLINE_CONFIG,
        OfflineLockError,
        fill_wheelhouse,
        lock_and_render,
        new_project,
        torch_index,
    )

    config = yaml.safe_load(OFFLINE_CONFIG.read_text())
    config["targets"] = {TARGET: config["targets"]["cpu"]}
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    try:
        project = new_project(root / "project", root / "config.yaml")
        lock = lock_and_render(project, torch_index(root / "torch-index"), TARGET)
        return project, fill_wheelhouse(lock, root / "wheels")
    except OfflineLockError as exc:
        sys.exit(f"bench_reproduce: {exc}")


def before_checkout(revision: str, directory: Path) -> Path:
    """The envkit package of ``revision``, unpacked (git archive) for PYTHONPATH."""
    directory.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, "envkit"], capture_output=True, check=False)
    if archive.returncode != 0:
        sys.exit(f"bench_reproduce: git archive {revision} failed: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive.stdout, check=True)
    return directory


def image_sizes(client) -> list[tuple[str, str]]:
    """Each image target of the checkout's envkit.yaml (notebook targets have none): the size of its latest image, where the engine
    has one built from the committed docker/<target>/Dockerfile (the same config-hash label)."""
    from envkit.image.build import LATEST, find_image, repository
    from envkit.project.load import load_config

    rows = []
    for name in load_config(REPO / "envkit.yaml").images:
        image = find_image(client, f"{repository(name)}:{LATEST}")
        rendered = re.search(
            r'io\.envkit\.config-hash="([0-9a-f]+)"', (REPO / "docker" / name / "Dockerfile").read_text()
        )
        committed = (
            image is not None and rendered and (image.labels or {}).get("io.envkit.config-hash") == rendered.group(1)
        )
        rows.append(
            (name, f"{image.attrs['Size'] / 1e9:.2f} GB" if committed else "no image of the committed files here")
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-image", required=True, help="the base to build on (scripts/base-image.sh makes one)")
    parser.add_argument("--before", metavar="REV", help="also time envkit diff with the envkit of this git revision")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from envkit.errors import EnvkitError
    from envkit.image import buildah
    from envkit.image.build_context import staging_path
    from envkit.support.docker_client import connect_docker, docker_sdk

    try:
        client = connect_docker()
        buildah.cli()
    except EnvkitError as exc:
        sys.exit(f"bench_reproduce: {exc}")
    with tempfile.TemporaryDirectory(prefix="envkit-bench-") as tmp:
        project, wheels = locked_project(Path(tmp))
        flags = ["--config", "envkit.yaml", "--base-image", args.base_image, "--wheelhouse", str(wheels)]
        docker_build, docker_s, _ = envkit(project, "build", TARGET, *flags, "--no-cache")
        docker_tag = docker_build.stdout.strip()
        docker_verify, docker_verify_s, _ = envkit(project, "verify", TARGET, *flags, check=False)
        buildah_runs = []
        for _ in range(2):
            done, seconds, _ = envkit(project, "build", TARGET, *flags, "--builder", "buildah", "--no-cache")
            buildah_runs.append(
                (done.stdout.strip(), seconds, DIGEST.search(done.stderr.strip().splitlines()[-1]).group(1))
            )
        buildah_tag = buildah_runs[-1][0]
        buildah_verify, buildah_verify_s, _ = envkit(project, "verify", TARGET, *flags, check=False)
        diffs = [("this checkout", *envkit(project, "diff", docker_tag, buildah_tag, check=False)[1:])]
        if args.before:
            old = before_checkout(args.before, Path(tmp) / "before")
            diffs.append(
                (
                    f"envkit at {args.before}",
                    *envkit(project, "diff", docker_tag, buildah_tag, check=False, pythonpath=old)[1:],
                )
            )
        sizes = {tag: client.images.get(tag).attrs["Size"] for tag in (docker_tag, buildah_tag)}
        shutil.rmtree(staging_path(project, TARGET), ignore_errors=True)

    def verdict(done: subprocess.CompletedProcess) -> str:
        lines = done.stdout.strip().splitlines()
        shown = [line for line in lines if line.startswith(("identical:", "files:", "digests differ"))]
        return "; ".join([*shown, lines[-1] if lines else done.stderr.strip()])

    print(
        f"configuration            the locked offline cpu project as {TARGET} (torch 2.13.0+cpu), base {args.base_image}"
    )
    print(f"cold build, docker       {docker_s:7.1f} s   {sizes[docker_tag] / 1e9:.2f} GB  {docker_tag}")
    for number, (tag, seconds, digest) in enumerate(buildah_runs, 1):
        print(f"cold build, buildah #{number}  {seconds:7.1f} s   {sizes[buildah_tag] / 1e9:.2f} GB  {tag}  {digest}")
    same = buildah_runs[0][2] == buildah_runs[1][2]
    print(f"buildah digests          {'identical' if same else 'DIFFER'}")
    print(f"verify, docker image     {docker_verify_s:7.1f} s   {verdict(docker_verify)}")
    print(f"verify, buildah image    {buildah_verify_s:7.1f} s   {verdict(buildah_verify)}")
    for name, wall, cpu in diffs:
        print(f"diff docker vs buildah   {wall:7.1f} s   ({cpu:.1f} s CPU; {name})")
    for name, size in image_sizes(client):
        print(f"image size, {name:12} {size}")

    for tag in (docker_tag, buildah_tag, f"envkit-{TARGET}:latest"):
        try:
            client.images.remove(tag, force=True)
        except docker_sdk().errors.ImageNotFound:  # gone with another of its tags
            pass
    for tag in (buildah_tag, f"envkit-{TARGET}:latest"):
        buildah.untag(tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

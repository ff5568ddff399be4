"""Build-cache benchmark: cold build, recipe edit, rebuild; layers changed and image size.

Goals (issue 5): a rebuild after a recipe edit takes under 5 s and changes one layer;
the cpu image is under 1.2 GB. Issue 13: a locked target's cold build installing its
lock with pip and with uv (`uv pip install --require-hashes`), side by side.

Three builds: a cold one (--no-cache), a warm one of the same context, and one after a
comment is appended to a recipe; layers are compared between the last two, which
share one cache lineage (a --no-cache build's layers need not be the ones the cache
hands out later). A per-run build arg keeps `envkit build` from answering "already
built" for contexts an earlier run left behind.

Works on a copy of the project (config, templates, recipes) in a temp directory, so
the recipe edit never touches the checkout. Needs a running Docker engine.

    .venv/bin/python benchmarks/bench_build.py          # the project's cpu target (needs PyPI)

    # a host without a registry or PyTorch's index: debootstrap'd base + wheelhouse
    .venv/bin/pip download -d /tmp/wheels 'torch==2.13.0+cpu' tqdm==4.67.1
    .venv/bin/python benchmarks/bench_build.py --config benchmarks/envkit-offline.yaml \\
        --base-image "$(scripts/base-image.sh)" --wheelhouse /tmp/wheels

    # the same target locked (benchmarks/offline_lock.py: torch from /opt/wheels, the rest
    # from the default index, the wheelhouse filled from the lock), cold with pip and with uv
    .venv/bin/python benchmarks/bench_build.py --locked-offline --base-image "$(scripts/base-image.sh)"

uv is not in the images: for its build the wheelhouse gets uv's wheel, the install step
unpacks uv's binary from it and runs it against /opt/venv (bytecode compiled, as pip
does; no cache, as pip's cache mount holds nothing for local wheels).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOAL_REBUILD_S = 5.0
GOAL_CHANGED_LAYERS = 1
GOAL_SIZE_GB = 1.2


# The locked Dockerfile's install command (templates/Dockerfile.j2), and what uv runs instead.
PIP_INSTALL = (
    "pip install \\\n      --require-hashes --no-deps --only-binary=:all: --find-links /wheels \\\n"
    "      -r /opt/envkit/requirements.lock\n"
)
UV_INSTALL = (
    "python -m zipfile -e /wheels/uv-{version}-*.whl /tmp/uv \\\n"
    " && chmod +x /tmp/uv/uv-{version}.data/scripts/uv \\\n"
    " && UV_NO_CACHE=1 /tmp/uv/uv-{version}.data/scripts/uv pip install --python /opt/venv/bin/python --compile-bytecode \\\n"
    "      --require-hashes --no-deps --only-binary=:all: --no-index --find-links /wheels \\\n"
    "      -r /opt/envkit/requirements.lock \\\n"
    " && rm -rf /tmp/uv\n"
)


STEP = re.compile(r"^#(\d+) \[[^\]]*\d+/\d+\] (\S+)")


def envkit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "envkit", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_build: envkit {args[0]} failed:\n{done.stderr[-3000:]}")
    return done


def timed_build(project: Path, target: str, flags: list[str]) -> tuple[str, float, list[str]]:
    """Tag, seconds, and the Dockerfile steps BuildKit ran rather than took from its cache."""
    start = time.perf_counter()
    done = envkit("build", target, "--config", "envkit.yaml", *flags, cwd=project)
    seconds = time.perf_counter() - start
    steps = {}
    for line in done.stderr.splitlines():
        match = STEP.match(line)
        if match and match.group(2) != "FROM":
            steps[match.group(1)] = line.split("] ", 1)[1][:60]
    cached = {line.split()[0][1:] for line in done.stderr.splitlines() if line.endswith(" CACHED")}
    return done.stdout.strip(), seconds, [text for step, text in steps.items() if step not in cached]


def uv_variant(project: Path, target: str, wheelhouse: Path) -> str:
    """Make the rendered Dockerfile install its lock with uv; returns uv's version."""
    import uv

    version = subprocess.run(
        [uv.find_uv_bin(), "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                           "--dest", str(wheelhouse), f"uv=={version}"], capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"bench_build: cannot download uv {version}: {done.stderr.strip().splitlines()[-1:]}")
    dockerfile = project / "docker" / target / "Dockerfile"
    text = dockerfile.read_text()
    if PIP_INSTALL not in text:
        sys.exit(f"bench_build: {dockerfile} has no locked pip install step to replace (is {target} locked?)")
    dockerfile.write_text(text.replace(PIP_INSTALL, UV_INSTALL.format(version=version)))
    return version


def locked_offline_project(project: Path, wheelhouse: Path) -> None:
    """benchmarks/offline_lock.py's project: the offline config locked, its wheelhouse filled from the lock."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from offline_lock import OfflineLockError, fill_wheelhouse, lock_and_render, new_project, torch_index

    try:
        new_project(project)
        fill_wheelhouse(lock_and_render(project, torch_index(project.parent / "torch-index")), wheelhouse)
    except OfflineLockError as exc:
        sys.exit(f"bench_build: {exc}")


def changed_layers(before: list[str], after: list[str]) -> int:
    """Layers of ``after`` that are not at the same position in ``before``."""
    return sum(1 for index, layer in enumerate(after) if index >= len(before) or before[index] != layer)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config",
        type=Path,
        default=REPO / "envkit.yaml",
        help="targets to build (templates and recipes are the checkout's)",
    )
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--recipe", default="mnist", help="recipe to edit (default: mnist)")
    parser.add_argument("--base-image", help="passed to envkit build")
    parser.add_argument("--wheelhouse", type=Path, help="passed to envkit build")
    parser.add_argument("--skip-cold", action="store_true", help="leave out the --no-cache build")
    parser.add_argument("--locked-offline", action="store_true",
                        help="lock the offline cpu config (torch from ENVKIT_TEST_WHEELS, default /opt/wheels) and "
                        "compare cold builds installing the lock with pip and with uv")  # fmt: skip
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from envkit.errors import EnvkitError
    from envkit.image.build import LATEST, repository
    from envkit.image.build_context import staging_path
    from envkit.support.docker_client import connect_docker

    try:
        client = connect_docker()
    except EnvkitError as exc:
        sys.exit(f"bench_build: {exc}")
    flags = [
        *(["--base-image", args.base_image] if args.base_image else []),
        *(["--wheelhouse", str(args.wheelhouse.resolve())] if args.wheelhouse else []),
    ]

    latest = f"{repository(args.target)}:{LATEST}"
    latest_before = next((image for image in client.images.list(name=latest)), None)
    with tempfile.TemporaryDirectory(prefix="envkit-bench-") as tmp:
        project = Path(tmp) / "project"
        uv_cold = None
        if args.locked_offline:
            wheelhouse = Path(tmp) / "wheels"
            locked_offline_project(project, wheelhouse)
            flags += ["--wheelhouse", str(wheelhouse)]
            # uv first, on its own copy of the project, so that the pip build below is the
            # one the warm and edit measurements continue from.
            uv_project = Path(tmp) / "uv-project"
            shutil.copytree(project, uv_project)
            uv_version = uv_variant(uv_project, args.target, wheelhouse)
            uv_tag, uv_s, _ = timed_build(uv_project, args.target, [*flags, "--no-cache"])
            uv_cold = (uv_version, uv_tag, uv_s, client.images.get(uv_tag).attrs["Size"])
            shutil.rmtree(staging_path(uv_project, args.target), ignore_errors=True)
        else:
            project.mkdir()
            shutil.copy(args.config, project / "envkit.yaml")
            for part in ("templates", "recipes"):
                shutil.copytree(REPO / part, project / part, ignore=shutil.ignore_patterns("__pycache__"))
            envkit("render", "--all", "--config", "envkit.yaml", cwd=project)

        if not args.skip_cold or uv_cold:
            cold_tag, cold_s, _ = timed_build(project, args.target, [*flags, "--no-cache"])
        flags += ["--build-arg", f"ENVKIT_BENCH_RUN={uuid.uuid4().hex}"]
        first_tag, first_s, _ = timed_build(project, args.target, flags)
        first = client.images.get(first_tag).attrs
        with (project / "recipes" / f"{args.recipe}.py").open("a") as recipe:
            recipe.write("# benchmark edit\n")
        second_tag, second_s, rebuilt = timed_build(project, args.target, flags)
        second = client.images.get(second_tag).attrs
        shutil.rmtree(staging_path(project, args.target), ignore_errors=True)
    # The per-run tags name throwaway images; latest goes back to what the user had.
    if latest_before is not None:
        latest_before.tag(repository(args.target), LATEST)
    for tag in (first_tag, second_tag, *([uv_cold[1]] if uv_cold else [])):
        client.images.remove(tag, force=True)

    changed = changed_layers(first["RootFS"]["Layers"], second["RootFS"]["Layers"])
    size_gb = second["Size"] / 1e9
    print(f"target                  {args.target}")
    if uv_cold:
        uv_version, uv_tag, uv_s, uv_size = uv_cold
        print(f"cold build, pip         {cold_s:7.1f} s   ({cold_tag}; pip install --require-hashes --no-deps)")
        print(
            f"cold build, uv {uv_version:8} {uv_s:7.1f} s   ({uv_tag}; uv pip install --require-hashes --no-deps --compile-bytecode)"
        )
        print(f"uv / pip                {uv_s / cold_s:7.3f}   (image {uv_size / 1e9:.2f} GB)")
    elif not args.skip_cold:
        print(f"cold build (--no-cache) {cold_s:7.1f} s   ({cold_tag})")
    print(f"warm build, no change   {first_s:7.1f} s   ({first_tag})")
    print(f"rebuild after edit      {second_s:7.1f} s   ({second_tag})")
    if not args.skip_cold or uv_cold:
        print(f"rebuild / cold          {second_s / cold_s:7.3f}")
    print(
        f"layers                  {len(second['RootFS']['Layers'])} total, {changed} changed (image layers vs the warm build)"
    )
    print(f"steps rebuilt           {len(rebuilt)}: {'; '.join(rebuilt)}")
    print(f"image size              {size_gb:7.2f} GB")
    print()
    print(f"goal rebuild < {GOAL_REBUILD_S:.0f} s      {'met' if second_s < GOAL_REBUILD_S else 'MISSED'}")
    print(f"goal {GOAL_CHANGED_LAYERS} changed layer      {'met' if changed == GOAL_CHANGED_LAYERS else 'MISSED'}")
    if changed > len(rebuilt):
        # Each --no-cache build adds a second cache record per step; BuildKit may hand
        # out either, so equal content can come back as different layer blobs.
        print("  (more layers differ than steps ran: the build cache holds records from earlier --no-cache builds)")
    print(f"goal size < {GOAL_SIZE_GB} GB      {'met' if size_gb < GOAL_SIZE_GB else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

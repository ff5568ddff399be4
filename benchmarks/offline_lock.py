"""A locked cpu project that builds with no index: what bench_build.py and the engine tests build.

PyTorch's CPU index is unreachable here, so the lock takes torch from a local stand-in
for it (a PEP 503 directory holding the torch wheels of --torch-wheels, e.g. /opt/wheels,
reached as a file:// URL); everything else comes from the default index. The wheelhouse
is then filled from the lock itself (`pip download --require-hashes --no-deps`), so the
image holds exactly the locked files.

    python benchmarks/offline_lock.py PROJECT_DIR WHEELHOUSE_DIR    # lock, render, fill
"""

from __future__ import annotations

import argparse
import hashlib
import html
import os
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OFFLINE_CONFIG = REPO / "benchmarks" / "envkit-offline.yaml"
TORCH_WHEELS = Path(os.environ.get("ENVKIT_TEST_WHEELS", "/opt/wheels"))


class OfflineLockError(Exception):
    """A step that needs the default index or a wheel that is not there: the caller skips or exits."""


def envkit(project: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "envkit", *args], cwd=project, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise OfflineLockError(f"envkit {' '.join(args)}: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
    return done


def torch_index(directory: Path, wheels: Path = TORCH_WHEELS) -> str:
    """A PEP 503 index of the torch wheels in ``wheels``; returns its file:// URL."""
    found = sorted(wheels.glob("torch-*.whl"))
    if not found:
        raise OfflineLockError(f"no torch wheel in {wheels} (set ENVKIT_TEST_WHEELS)")
    project = directory / "torch"
    project.mkdir(parents=True, exist_ok=True)
    links = []
    for wheel in found:
        if not (project / wheel.name).exists():
            shutil.copy(wheel, project / wheel.name)
        digest = hashlib.sha256((project / wheel.name).read_bytes()).hexdigest()
        links.append(f'<a href="{urllib.parse.quote(wheel.name)}#sha256={digest}">{html.escape(wheel.name)}</a>')
    (project / "index.html").write_text("<!DOCTYPE html>\n<html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    return directory.resolve().as_uri() + "/"


def with_experiments(targets_yaml: str) -> str:
    """A project config: ``targets_yaml``'s targets and the checkout's experiments of their kinds (the
    experiments live in the project's envkit.yaml, their one source), so a copy runs them as the checkout does."""
    import yaml

    config = yaml.safe_load(targets_yaml)
    kinds = {target.get("kind") for target in config["targets"].values()}
    table = yaml.safe_load((REPO / "envkit.yaml").read_text(encoding="utf-8"))["experiments"]
    config["experiments"] = {name: entry for name, entry in table.items() if entry.get("kind") in kinds}
    return yaml.safe_dump(config, sort_keys=False)


def new_project(root: Path, config: Path = OFFLINE_CONFIG) -> Path:
    """A project copy (config with the checkout's experiments, templates, recipes, .dockerignore) in ``root``; the
    checkout is never touched."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "envkit.yaml").write_text(with_experiments(config.read_text(encoding="utf-8")), encoding="utf-8")
    for part in ("templates", "recipes"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    # What the images hold of this project: its recipes alone, as in the checkout.
    shutil.copy(REPO / ".dockerignore", root / ".dockerignore")
    return root


def lock_and_render(project: Path, torch_index_url: str | None, target: str = "cpu") -> Path:
    """`envkit lock` (torch from ``torch_index_url`` where the target takes it from PyTorch's
    index) then `envkit render`; returns the lock."""
    # No engine: the base's digest would be asked of Docker Hub, which must never be reached.
    env = {**os.environ, "DOCKER_HOST": f"unix://{project}/no-engine.sock"}
    mirror = ["--torch-index-url", torch_index_url] if torch_index_url else []
    envkit(project, "lock", "--target", target, "--config", "envkit.yaml", *mirror, env=env)
    envkit(project, "render", "--all", "--config", "envkit.yaml")
    return project / "docker" / target / "requirements.lock"


def fill_wheelhouse(lock: Path, wheelhouse: Path, torch_wheels: Path = TORCH_WHEELS) -> Path:
    """Exactly the lock's files, hash-checked by pip, into ``wheelhouse``.

    pip picks the files for this interpreter and host: the same Python (3.11) and glibc
    as the debootstrap'd Debian 12 base the offline config builds on.
    """
    wheelhouse.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--require-hashes", "--no-deps",
               "--only-binary=:all:", "--find-links", str(torch_wheels), "--dest", str(wheelhouse), "-r", str(lock)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise OfflineLockError(
            f"cannot fill {wheelhouse} from {lock}: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    return wheelhouse


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", type=Path)
    parser.add_argument("wheelhouse", type=Path)
    args = parser.parse_args()
    try:
        project = new_project(args.project)
        lock = lock_and_render(project, torch_index(project / "torch-index"))
        fill_wheelhouse(lock, args.wheelhouse)
    except OfflineLockError as exc:
        sys.exit(f"offline_lock: {exc}")
    print(lock)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

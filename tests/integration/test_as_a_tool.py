"""envkit as a user has it (issue 25 §1 and §9): the wheel built from this checkout, installed into a fresh
virtual environment outside it, takes tests/example_project (a user's repository, nothing of this one's)
from `envkit init` through its locks and its render, in a temporary directory. Nothing of the checkout is on
that envkit's path, and nothing is edited in its site-packages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import paths
import pytest

REPO = paths.REPO_ROOT
EXAMPLE = paths.TESTS / "example_project"


def run(argv: list[str], cwd: Path, timeout: int = 900, **env: str) -> subprocess.CompletedProcess:
    # No PYTHONPATH and a neutral working directory: the tool must not see this checkout.
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | env
    return subprocess.run(argv, cwd=cwd, env=clean, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def tool(tmp_path_factory) -> Path:
    """``bin/envkit`` of a fresh venv holding only the built wheel and its dependencies."""
    work = tmp_path_factory.mktemp("tool")
    source = work / "source"  # a clean copy: the wheel is built from the committed and working files alone
    skipped = shutil.ignore_patterns(".venv*", ".git", ".cache", "__pycache__", "*.egg-info", "build")
    # results/ and data/ at the top are runs' output; envkit/data/ is the package's own
    top = {"results", "data"}
    shutil.copytree(
        REPO,
        source,
        ignore=lambda folder, names: skipped(folder, names) | (top & set(names) if Path(folder) == REPO else set()),
    )
    built = run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(work / "dist"),
            str(source),
        ],
        work,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((work / "dist").glob("envkit-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"envkit/templates/Dockerfile.j2", "envkit/templates/run.sh.j2", "envkit/templates/init/envkit.mk"} <= names
    assert "envkit/data/kinds.yaml" in names and not any(n.startswith("envkit/data/experiments.y") for n in names)
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    venv = work / "venv"
    assert run([uv, "venv", "--python", sys.executable, str(venv)], work).returncode == 0
    installed = run([uv, "pip", "install", "--python", str(venv / "bin" / "python"), str(wheel)], work)
    assert installed.returncode == 0, installed.stderr[-2000:]
    return venv / "bin" / "envkit"


@pytest.mark.slow
def test_a_users_repository_from_init_to_its_locks_and_render(tool, tmp_path):
    project = tmp_path / "mine"
    shutil.copytree(EXAMPLE, project)
    envkit = str(tool)
    done = run([envkit, "init"], project)
    assert done.returncode == 0, done.stderr
    assert not (project / "templates").exists()  # the templates are the installed envkit's
    for target in ("cuda", "tpu-vm"):
        locked = run([envkit, "lock", "--target", target], project, timeout=1800)
        assert locked.returncode == 0, locked.stderr
        lock = (project / "docker" / target / "requirements.lock").read_text()
        assert "tabulate==0.9.0" in lock and "torch==2.9.0" in lock and "--hash=sha256:" in lock
    rendered = run([envkit, "render", "--all"], project)
    assert rendered.returncode == 0, rendered.stderr
    assert (
        "tabulate" in (project / "docker" / "cuda" / "Dockerfile").read_text()
        or "requirements.lock" in (project / "docker" / "cuda" / "Dockerfile").read_text()
    )
    assert run([envkit, "render", "--all", "--check"], project).returncode == 0
    listed = run([envkit, "experiment", "--list"], project)
    assert listed.stdout.split() == ["cpu-train", "gpu-train", "tpu-train"]
    planned = run(["make", "-s", "gpu-train", f"ENVKIT={envkit}", "DRY_RUN=1"], project)
    assert planned.returncode == 0 and "experiment gpu-train" in planned.stdout, planned.stderr

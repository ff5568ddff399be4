"""CPU mode for envkit's notebooks (envkit/notebook/runtime.py), shared by the tests and benchmarks/bench_notebook.py.

``build_wheelhouse`` fills a folder with the wheels of a small CPU lock and the lock itself
(requirements.lock, resolved by uv from those wheels offline); ``execute`` runs a notebook
headless with nbclient on an ipykernel, in CPU mode, with that wheelhouse.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from envkit.lock.resolve import uv_binary
from envkit.notebook import runtime_shared

# torch 2.13.0's CPU build, which pip takes from local disk on envkit's development machines and CI. Named by its
# local version: where pip's sources have only the default index's torch (its CUDA build, whose CUDA libraries
# are GBs), the download stops at once and the tests skip, saying so.
CPU_REQUIREMENTS = ("torch==2.13.0+cpu", "tqdm", "numpy")


def build_wheelhouse(folder: Path) -> Path:
    """The wheels of CPU_REQUIREMENTS (from pip's configured sources) and their lock; RuntimeError saying why not."""
    folder.mkdir(parents=True, exist_ok=True)
    download = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--only-binary=:all:",
            "--dest",
            str(folder),
            *CPU_REQUIREMENTS,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if download.returncode != 0:
        raise RuntimeError(
            f"pip cannot download {' '.join(CPU_REQUIREMENTS)} for the CPU wheelhouse: "
            f"{(download.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    (folder / "requirements.in").write_text("\n".join(CPU_REQUIREMENTS) + "\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("UV_")}
    subprocess.run(
        [
            uv_binary(),
            "pip",
            "compile",
            "--quiet",
            "--no-config",
            "--offline",
            "--no-index",
            "--find-links",
            str(folder),
            "--generate-hashes",
            "--no-header",
            "--no-annotate",
            "--python",
            sys.executable,
            str(folder / "requirements.in"),
            "--output-file",
            str(folder / "requirements.lock"),
        ],
        check=True,
        env=env,
        timeout=300,
    )
    return folder


def cpu_mode_env(wheelhouse: Path, work: Path, output: Path | None = None) -> dict[str, str]:
    """The variables that put a notebook (or the helper called directly) in CPU mode, with uv on PATH."""
    env = {
        runtime_shared.CPU_MODE: str(wheelhouse),
        "ENVKIT_NOTEBOOK_WORK": str(work),
        "PATH": f"{Path(uv_binary()).parent}{os.pathsep}{os.environ['PATH']}",
        # uv keys its cache by the wheelhouse's path, new each session: in the user's cache every session would
        # leave another unpacked torch (700 MB) behind. Beside the wheelhouse, it goes with the session's files,
        # and the notebooks' venvs link their files from it. Through XDG_CACHE_HOME (uv's default cache is
        # $XDG_CACHE_HOME/uv): the runtime drops every UV_* variable before it calls uv (runtime_venv._clean_env).
        "XDG_CACHE_HOME": str(wheelhouse.with_name(f"{wheelhouse.name}-cache")),
    }
    if output is not None:
        env[runtime_shared.OUTPUT] = str(output)
    return env


def execute(path: Path, wheelhouse: Path, work: Path, output: Path) -> tuple[nbformat.NotebookNode, float]:
    """Run the notebook at ``path`` top to bottom in CPU mode; the executed notebook and its wall seconds."""
    notebook = nbformat.read(path, as_version=4)
    env = cpu_mode_env(wheelhouse, work, output)
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    start = time.monotonic()
    try:
        NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return notebook, time.monotonic() - start

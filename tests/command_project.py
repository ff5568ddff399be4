"""A user's project with command experiments (issue 25 §8), on this repository's project: its locks are fresh.

tests/notebook/test_builder_commands.py renders and runs its notebooks' steps; tests/integration/test_notebook_execute.py
executes one in CPU mode.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from project_copy import copy_project

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
# The user's own script: no envkit import, its own flags; it reports what it saw where the test can read it.
TRAIN = """import json, os, sys
from pathlib import Path

import helper

seen = {"cwd": os.getcwd(), "argv": sys.argv[1:], "prefix": sys.prefix, "flavour": os.environ.get("FLAVOUR"),
        **{name: os.environ.get(name) for name in ("ENVKIT_DATA_DIR", "ENVKIT_RESULTS_DIR", "ENVKIT_DEVICE",
                                                   "ENVKIT_EXPERIMENT", "ENVKIT_TARGET", "ENVKIT_METRICS_DIR")}}
Path(os.environ["ENVKIT_DATA_DIR"], "seen.json").write_text(json.dumps(seen))
Path(os.environ["ENVKIT_METRICS_DIR"], "metrics.json").write_text(json.dumps({"loss": helper.LOSS}))
print("trained, loss", helper.LOSS)
sys.exit(int(os.environ.get("FAIL", "0")))
"""
EXPERIMENTS = """experiments:
  gpu-train:
    summary: train.py on one GPU
    kind: cuda
    command: [python, train.py, --epochs, "2"]
    gpus: first
    env: {FLAVOUR: notebook}
  gpu-shell:
    summary: a shell script that starts Python itself
    kind: cuda
    command: [sh, run.sh]
  gpu-script:
    summary: an executable script of the project's
    kind: cuda
    command: [./run.sh]
  tpu-train:
    summary: train.py on a TPU
    kind: tpu-vm
    command: [python, train.py]
"""


def git(root: Path, *argv: str) -> None:
    subprocess.run([*GIT, *argv], cwd=root, check=True, capture_output=True)


def command_project(root: Path) -> Path:
    """This repository's project with EXPERIMENTS, a user's script, its module, a shell script, a binary file,
    data that .dockerignore keeps out, all committed; then a file git does not track."""
    copy_project(root)
    config = root / "envkit.yaml"
    config.write_text(config.read_text().replace("experiments:\n", EXPERIMENTS, 1))
    (root / "train.py").write_text(TRAIN)
    (root / "helper.py").write_text("LOSS = 0.25\n")
    (root / "run.sh").write_text('#!/bin/sh\npython -c "import sys; print(sys.prefix)" > "$ENVKIT_DATA_DIR/prefix"\n')
    (root / "run.sh").chmod(0o755)
    (root / "logo.png").write_bytes(bytes(range(256)) * 4)  # not text: carried in the archive as it is
    (root / "data").mkdir()
    (root / "data" / "ignored.csv").write_text("x\n1\n")
    (root / ".dockerignore").write_text("data/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "project")
    (root / "untracked.py").write_text("print('never committed')\n")
    return root

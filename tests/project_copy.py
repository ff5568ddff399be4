"""A copy of the project as a clone has it: what tests may break freely."""

from __future__ import annotations

import shutil
from pathlib import Path

from paths import REPO_ROOT

# What a clone's user runs envkit on: the config, what a render reads and the committed outputs.
PARTS = ("templates", "recipes", "docker", "notebooks")


def copy_project(root: Path) -> Path:
    """envkit.yaml, templates/, recipes/, docker/ and notebooks/ copied into ``root``; returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "envkit.yaml", root / "envkit.yaml")
    for part in PARTS:
        shutil.copytree(REPO_ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    return root

"""envkit's cache directory: what is kept between runs to save time, never needed for correctness."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Same place scripts/base-image.sh caches the base image."""
    configured = os.environ.get("ENVKIT_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envkit"

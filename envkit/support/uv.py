"""Where uv is: the `uv` wheel's own binary, else `uv` on PATH. Standard library only."""

from __future__ import annotations

import shutil

from envkit.errors import EnvkitError


def find_uv() -> str | None:
    try:
        import uv

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def uv_binary() -> str:
    found = find_uv()
    if found is None:
        raise EnvkitError("uv is not installed: envkit lock resolves with it; pip install 'envkit[dev]' (or uv)")
    return found

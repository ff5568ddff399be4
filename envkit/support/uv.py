"""Where uv is: the `uv` wheel's own binary, else `uv` on PATH. Standard library only."""

from __future__ import annotations

import os
import shutil

from envkit import DISTRIBUTION
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
        raise EnvkitError(
            f"uv is not installed: envkit lock resolves with it; "
            f"reinstall envkit ({DISTRIBUTION}, which depends on uv) "
            "or pip install uv"
        )
    return found


# Settings the caller's environment must not slip into a lock or its checks: only these uv
# variables pass (the cache, TLS and timeouts change no answer).
UV_ENV_KEPT = {"UV_CACHE_DIR", "UV_NATIVE_TLS", "UV_HTTP_TIMEOUT", "UV_HTTP_RETRIES", "UV_OFFLINE"}
# uv retries an unreachable index 3 times with backoff (5 s per index); once is
# enough to ride out a blip, and `envkit lock --all` stays quick where PyTorch's
# index is out of reach. UV_HTTP_RETRIES overrides it.
UV_DEFAULT_RETRIES = "1"
# envkit reads uv's messages (the cause of a failed resolution) from lines uv wraps at COLUMNS: a
# caller's COLUMNS=80 cut "Because libtpu has no wheels with a matching Python ABI tag (e.g., cp313)"
# before the tag. One message is one line however wide the caller's terminal is.
UV_COLUMNS = "100000"


def uv_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("UV_") or key in UV_ENV_KEPT}
    env.setdefault("UV_HTTP_RETRIES", UV_DEFAULT_RETRIES)
    env["COLUMNS"] = UV_COLUMNS
    return env

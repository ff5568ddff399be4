"""An installer's hash refusal read from its output, as one line naming the package.

Standard library only: envkit/host/venv.py runs before any environment exists."""

from __future__ import annotations

import re

# BuildKit prefixes each line of a RUN step's output with "#<step> <seconds> ".
_STEP_PREFIX = r"^#\d+ \d+\.\d+ "


def hash_mismatch(log: list[str]) -> str | None:
    """pip's refusal of a file whose sha256 the lock does not list, as one line naming the package."""
    lines = [re.sub(_STEP_PREFIX, "", line).strip() for line in log]
    try:
        start = next(i for i, line in enumerate(lines) if "DO NOT MATCH THE HASHES" in line)
    except StopIteration:
        return None
    found = {}
    for line in lines[start + 1 :]:
        if " from " in line and line.endswith(":") and "package" not in found:
            found["package"] = line.split(" from ", 1)[0]
        elif line.startswith(("Expected sha256", "Got")) and line.split()[0] not in found:
            found[line.split()[0]] = line.split()[-1]
    return _refused("pip", found.get("package", "a package"), found.get("Got", "?"), found.get("Expected", "?"))


def uv_hash_mismatch(log: list[str]) -> str | None:
    """uv's refusal ("Hash mismatch for `name==version`", then Expected: and Computed: sha256 lines), or None."""
    lines = [line.strip() for line in log]
    start = next((i for i, line in enumerate(lines) if "Hash mismatch for `" in line), None)
    if start is None:
        return None
    package = lines[start].split("`")[1]
    following = [line.removeprefix("sha256:") for line in lines[start + 1 :] if line]
    found = {label: following[i + 1] for i, label in enumerate(following[:-1]) if label in ("Expected:", "Computed:")}
    return _refused("uv", package, found.get("Computed:", "?"), found.get("Expected:", "?"))


def _refused(installer: str, package: str, got: str, expected: str) -> str:
    return (
        f"{installer} refused {package}: its file has sha256 {got}, which the lock does not list "
        f"(expected {expected}); the lock or the wheel was changed: relock with "
        f"'envkit lock', or replace the wheel with the locked one"
    )

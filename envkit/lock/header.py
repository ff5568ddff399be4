"""A lock's header as `envkit lock` writes it: what it was resolved from (the inputs' digest, platform, Python,
indexes, base image), the digest of its packages, and a host lock's wheel coverage per platform and Python.
envkit/lock/lockfile.py reads it back.
"""

from __future__ import annotations

from pathlib import Path

from envkit.lock.inputs import LockInputs
from envkit.lock.lockfile import (
    BASE_LINE,
    IMAGE_PLATFORMS_LINE,
    INPUTS_LINE,
    LOCK_FILE,
    NO_WHEEL,
    PACKAGES_LINE,
    PLATFORM_LINE,
    WHEELS_LINE,
    LockFile,
    header_lines,
    packages_digest,
    requirements_lock_path,
)
from envkit.project import marks

COMMAND_LINE = "# resolved with: "


def wheels_lines(wheels: dict[tuple[str, str], tuple[str, ...]]) -> list[str]:
    return [
        f"{WHEELS_LINE}{where} python {python}: {NO_WHEEL + ' '.join(missing) if missing else 'ok'}"
        for (where, python), missing in wheels.items()
    ]


def lock_header(
    inputs: LockInputs,
    base_image: str | None,
    command: str,
    body: str,
    wheels: dict[tuple[str, str], tuple[str, ...]] | None = None,
    platforms: tuple[str, ...] = (),
) -> str:
    """The lock's header; ``platforms``: an image target's (none for a host environment or a notebook target)."""
    if inputs.torch_index:
        indexes = f"torch, torchvision from PyTorch's {inputs.torch_variant} index; everything else from "
    else:
        indexes = "every package from "
    indexes += "the target's pip_index_url" if inputs.index_url else "the default index"
    # The mark by which envkit knows its own locks (envkit.project.marks) begins it.
    if inputs.source == "target":
        what, relock, name = (
            f'{marks.LOCK.decode()}"{inputs.target}"',
            f"envkit.yaml, then run `envkit lock --target {inputs.target}`",
            LOCK_FILE,
        )
    else:
        name = requirements_lock_path(Path(inputs.target)).name
        what, relock = (
            marks.ANY_LOCK.decode() + inputs.target,
            f"{inputs.target}, then run `envkit lock --requirements` on it",
        )
    lines = [
        f"{what}: every package pinned by version and sha256.",
        f"# Do not edit: change {relock}.",
        f"# Install: pip install --require-hashes --no-deps --only-binary=:all: -r {name}",
        f"{INPUTS_LINE}{inputs.digest()}",
        f"{PACKAGES_LINE}{packages_digest(body, base_image)}",
        f"{PLATFORM_LINE}{inputs.platform}, python {inputs.python}",
        *([f"{IMAGE_PLATFORMS_LINE}{' '.join(platforms)}"] if platforms else []),
        *wheels_lines(wheels or {}),
        f"# indexes: {indexes}",
        f"# top-level: {' '.join(inputs.requirements)}",
        *([f"{BASE_LINE}{base_image}"] if base_image else []),
        f"{COMMAND_LINE}{command}",
    ]
    return "\n".join(lines) + "\n"


def edited_header(lock: LockFile, inputs: LockInputs, platforms: tuple[str, ...] = ()) -> str | None:
    """The first line of the lock's header that is not what `envkit lock` writes for ``inputs`` (a hand-edited
    platform, indexes or top-level line), or None. What came from resolving (base image, wheels, the command) is
    taken as recorded: packages-sha256 covers a pinned base; inputs-sha256 and packages-sha256 are checked apart."""
    recorded = header_lines(lock.text)
    command = next((line[len(COMMAND_LINE) :] for line in recorded if line.startswith(COMMAND_LINE)), "")
    expected = lock_header(inputs, lock.base_image, command, "", lock.wheels, platforms).splitlines()
    apart = (INPUTS_LINE, PACKAGES_LINE)
    recorded, expected = ([line for line in lines if not line.startswith(apart)] for lines in (recorded, expected))
    if recorded == expected:
        return None
    changed = [line for line in recorded if line not in expected] + [line for line in expected if line not in recorded]
    shown = (changed or recorded)[0].split(":", 1)[0]
    return (
        f"its header's {shown!r} line is not what envkit lock writes for its inputs (edited after it was locked, or "
        "locked by an older envkit)"
    )

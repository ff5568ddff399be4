"""The host platforms and Pythons a host environment (requirements/<name>.in -> <name>.lock) may run on.

A host lock is universal (one file, markers per platform) and records, for every platform and
Python here, which of its packages have no wheel there; a requirements input names the ones it
must serve (`# platforms:` and `# python:` lines, default all). Standard library only:
envkit/host/venv.py reads it before any environment exists.
"""

import sys
from typing import NamedTuple

from envkit.errors import EnvkitError

PYTHONS = ("3.11", "3.12", "3.13")


class HostPlatform(NamedTuple):
    name: str  # as docker names platforms: linux/amd64
    uv_platform: str  # uv's --python-platform; {manylinux} is the glibc the lock is checked against
    uv_env: tuple[tuple[str, str], ...]  # what uv needs besides to pick this platform's wheels
    title: str


PLATFORMS = {
    p.name: p
    for p in (
        HostPlatform("linux/amd64", "x86_64-manylinux_{manylinux}", (), "Linux x86-64"),
        HostPlatform("linux/arm64", "aarch64-manylinux_{manylinux}", (), "Linux aarch64"),
        # torch 2.14's one Mac wheel is macosx_14_0_arm64: uv's default (13.0) would find none.
        HostPlatform(
            "macos/arm64", "aarch64-apple-darwin", (("MACOSX_DEPLOYMENT_TARGET", "14.0"),), "macOS 14+ on Apple silicon"
        ),
    )
}  # fmt: skip
MACOS_OLDEST = (14, 0)


def this_platform() -> str:
    """This host's platform name, or one line saying it is not one envkit's host environments run on."""
    import platform  # here: render imports this module for its table, and never asks this

    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    if sys.platform.startswith("linux"):
        name = f"linux/{arch}"
    elif sys.platform == "darwin":
        name = f"macos/{arch}"
        release = tuple(int(part) for part in (platform.mac_ver()[0] or "0").split(".")[:2])
        if name in PLATFORMS and release < MACOS_OLDEST:
            raise EnvkitError(
                f"macOS {platform.mac_ver()[0]} is not supported: torch's Mac wheels need macOS "
                f"{'.'.join(map(str, MACOS_OLDEST))} or later"
            )
    else:
        name = f"{sys.platform}/{arch}"
    if name not in PLATFORMS:
        raise EnvkitError(f"this host ({name}) is not supported: host environments run on {', '.join(PLATFORMS)}")
    return name


def check_names(platforms: list[str], pythons: list[str], where: str) -> None:
    """One line for a platform or Python that envkit's host environments do not run on."""
    for name in platforms:
        if name not in PLATFORMS:
            raise EnvkitError(f"{where}: platform {name} is not supported: choose from {', '.join(PLATFORMS)}")
    for python in pythons:
        if python not in PYTHONS:
            raise EnvkitError(f"{where}: Python {python} is not supported: choose from {', '.join(PYTHONS)}")

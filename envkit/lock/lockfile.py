"""Locks: docker/<target>/requirements.lock, every package pinned by version and sha256: the file's format.

A lock is a pip requirements file (`name==version` and its `--hash=sha256:`
lines, no URLs) under a comment header. The header records the sha256 of the
inputs, so a changed top-level pin, index setting, platform or Python shows up
as a stale lock without contacting any index, and the sha256 of the packages
below it, so a hand-edited lock shows too. Where the header pins the base image by digest (which render writes
into FROM), packages-sha256 covers that line as well; the other header lines are what the inputs give
(envkit/lock/header.py's edited_header checks them).

This module reads a lock and says where one lives; what it is resolved from is envkit/lock/inputs.py, its header
as written is envkit/lock/header.py, `envkit lock --check` is envkit/lock/status.py, and envkit/lock/resolve.py
makes locks with uv. Reading a lock needs the standard library alone (envkit/host/venv.py runs before any
environment exists).
"""

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple

from envkit.errors import EnvkitError
from envkit.support.bounded_load import Refused, load_text, read_bytes

if TYPE_CHECKING:
    from envkit.project.config import ProjectConfig
    from envkit.project.output import Output

LOCK_FILE = "requirements.lock"
INPUTS_LINE = "# inputs-sha256: "
PACKAGES_LINE = "# packages-sha256: "
BASE_LINE = "# base-image: "
PLATFORM_LINE = "# platform: "
# An image target's lock: the platforms its image installs it on (envkit.yaml platforms), in docker's names.
IMAGE_PLATFORMS_LINE = "# image platforms: "
# A host lock's coverage, one line per platform and Python: "linux/arm64 python 3.12: ok" or ": no wheel for a b".
WHEELS_LINE = "# wheels: "
NO_WHEEL = "no wheel for "
# A host lock is universal: its platform field names the platforms it must serve.
UNIVERSAL = "universal: "


class LockFile(NamedTuple):
    """A lock file as read: its header's records and its pinned packages."""

    inputs_sha256: str | None
    base_image: str | None  # as recorded: name:tag@sha256:... or name:tag (...)
    packages: dict[str, str]  # normalised name -> version
    unhashed: tuple[str, ...]  # requirement lines without a --hash
    sha256: str  # of the whole file: what images and results record
    packages_sha256: str | None = None  # as the header records it (None: written before envkit recorded it)
    body_sha256: str = ""  # what packages-sha256 must be for the lock as it is now (packages_digest)
    platform: str | None = None  # uv's --python-platform it was resolved for, or "universal: ..." (a host lock)
    python: str | None = None  # major.minor it was resolved for (a host lock: those it must serve, space-separated)
    text: str = ""  # the whole file, as sha256 hashes it (a notebook carries it)
    # A host lock's coverage: (platform, python) -> the packages without a wheel there (empty: it installs there).
    wheels: Mapping[tuple[str, str], tuple[str, ...]] = MappingProxyType({})

    @property
    def pythons(self) -> tuple[str, ...]:
        return tuple((self.python or "").split())

    @property
    def platforms(self) -> tuple[str, ...]:
        """The platforms a host lock must serve (empty for a target's lock, made for one platform)."""
        return tuple(self.platform.removeprefix(UNIVERSAL).split()) if self.universal else ()

    @property
    def universal(self) -> bool:
        return bool(self.platform and self.platform.startswith(UNIVERSAL))


def lock_path(config: "ProjectConfig", name: str) -> Path:
    return target_lock_path(config.root, config.output, name, config.target(name).is_notebook)


def target_lock_path(root: Path, output: "Output", name: str, notebook: bool) -> Path:
    """Where target ``name``'s lock lives: a notebook target has no image folder, its lock sits beside its notebooks
    (``output``: the config's folders)."""
    folder = output.notebook_folder(root, name) if notebook else output.image_folder(root, name)
    return folder / LOCK_FILE


def requirements_lock_path(path: Path) -> Path:
    return path.with_suffix(".lock")


def normalise(name: str) -> str:
    """PEP 503 normal form of a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> LockFile | None:
    """The parsed lock, or None when the target has none: only an absent lock means unlocked."""
    try:
        data = read_bytes(path)
    except (FileNotFoundError, NotADirectoryError):  # nothing there (a file in place of docker/ included)
        if path.is_symlink():  # a lock was meant to be there: building unlocked would hide that
            raise EnvkitError(
                f"cannot read {path}: it is a symlink to {os.readlink(path)}, which does not exist"
            ) from None
        return None
    except OSError as exc:
        raise EnvkitError(f"cannot read {path}: {exc.strerror or exc}") from None
    except Refused as exc:
        raise EnvkitError(exc.at(path)) from None
    inputs = base = recorded_packages = platform = python = None
    packages: dict[str, str] = {}
    wheels: dict[tuple[str, str], tuple[str, ...]] = {}
    unhashed = []
    text = data.decode("utf-8", errors="replace")
    for line in _requirement_lines(text):
        if line.startswith(INPUTS_LINE):
            inputs = line[len(INPUTS_LINE) :].strip()
        elif line.startswith(PACKAGES_LINE):
            recorded_packages = line[len(PACKAGES_LINE) :].strip()
        elif line.startswith(BASE_LINE):
            base = line[len(BASE_LINE) :].strip()
        elif line.startswith(PLATFORM_LINE):
            platform, _, python = line[len(PLATFORM_LINE) :].strip().partition(", python ")
        elif line.startswith(WHEELS_LINE):
            cell, _, verdict = line[len(WHEELS_LINE) :].partition(": ")
            where, _, version = cell.partition(" python ")
            wheels[where, version] = tuple(verdict.removeprefix(NO_WHEEL).split()) if verdict != "ok" else ()
        elif line and not line.startswith("#"):
            requirement, *options = line.split()
            name, version = _pin(requirement)
            packages[name] = version
            if not any(option.startswith("--hash=sha256:") for option in options):
                unhashed.append(requirement)
    return LockFile(
        inputs,
        base,
        packages,
        tuple(unhashed),
        hashlib.sha256(data).hexdigest(),
        recorded_packages,
        packages_digest(_body(text), base),
        platform,
        python or None,
        text,
        wheels,
    )


def requirement_entry(path: Path, name: str) -> str | None:
    """The lock's line for one package, with its --hash options, or None when the lock does not pin it."""
    return next(
        (e for e in requirement_entries(load_text(path)) if entry_name(e) == normalise(name)),
        None,
    )


def entry_name(entry: str) -> str:
    """The normalised name of a lock's requirement line (``name==version ; marker --hash=...``)."""
    return _pin(entry.split()[0])[0]


def requirement_entries(text: str) -> list[str]:
    """A lock's requirements, each on one line with its --hash options and marker."""
    return [line for line in _requirement_lines(text) if line and not line.startswith("#")]


def _pin(requirement: str) -> tuple[str, str]:
    """A lock line's ``name[extra]==version;marker`` as (normalised name, version). Locks are envkit's own
    format (`name==version`, uv's output), read with the standard library alone like the rest of a lock."""
    name, _, version = requirement.partition("==")
    return normalise(name.split("[", 1)[0]), version.split(";", 1)[0]


def _body(text: str) -> str:
    """The requirement lines: everything after the header's leading comment lines."""
    lines = text.splitlines(keepends=True)
    start = next((index for index, line in enumerate(lines) if not line.startswith("#")), len(lines))
    return "".join(lines[start:])


def packages_digest(body: str, base_image: str | None) -> str:
    """packages-sha256: of the requirement lines, and of the base-image line where it pins a digest, which render
    writes into FROM. A line without one is not covered, so the locks written before it was keep their digest."""
    pinned = f"{BASE_LINE}{base_image}\n" if base_image and "@sha256:" in base_image else ""
    return hashlib.sha256((body + pinned).encode("utf-8")).hexdigest()


def hand_edited(lock: LockFile) -> str | None:
    """Why the packages or the pinned base image are not the ones envkit lock wrote, or None when they are."""
    if lock.packages_sha256 is None or lock.packages_sha256 == lock.body_sha256:
        return None
    if lock.packages_sha256 == packages_digest(_body(lock.text), None):
        return (
            f"its base-image line ({lock.base_image}) names a digest that its packages-sha256 does not cover: edited "
            "after it was locked, or locked by an older envkit"
        )
    pinned = lock.base_image and "@sha256:" in lock.base_image
    what = "its packages or its base image's digest were" if pinned else "its packages were"
    return f"{what} edited after it was locked (the packages-sha256 of its header no longer matches)"


def header_lines(text: str) -> list[str]:
    """The header: the lock's leading comment lines."""
    return text[: len(text) - len(_body(text))].splitlines()


def _requirement_lines(text: str) -> list[str]:
    # Joins each requirement with its backslash-continued --hash lines.
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append((current + stripped).strip())
        current = ""
    if current:
        lines.append(current.strip())
    return lines

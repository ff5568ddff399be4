"""Locks: docker/<target>/requirements.lock, every package pinned by version and sha256.

This module holds what a lock is resolved from (LockInputs), the file's format
and `envkit lock --check`; it runs offline and imports neither uv nor docker.
envkit/lock/resolve.py makes locks with uv. Reading a lock needs the standard
library alone (envkit/host/venv.py runs before any environment exists), so YAML,
the config and the matrix are imported where they are used.

A lock is a pip requirements file (`name==version` and its `--hash=sha256:`
lines, no URLs) under a comment header. The header records the sha256 of the
inputs, so a changed top-level pin, index setting, platform or Python shows up
as a stale lock without contacting any index, and the sha256 of the packages
below it, so a hand-edited lock shows too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from envkit.errors import EnvkitError
from envkit.lock.host_platforms import PLATFORMS, PYTHONS, check_names
from envkit.project.datafile import DATA_DIR
from envkit.project.requirement import requirement_name
from envkit.support.bounded_load import Refused, load_text, load_yaml, read_bytes, read_text

if TYPE_CHECKING:
    from envkit.project.config import ProjectConfig, Target

LOCK_FILE = "requirements.lock"
GLIBC_PATH = DATA_DIR / "base_glibc.yaml"
# The only packages that may come from PyTorch's own index (its +cpu/+cuXYZ builds);
# everything else comes from the default index, so no name can be served by both.
TORCH_INDEX_PACKAGES = ("torch", "torchvision")
# A cpu image that pulls these has resolved PyPI's CUDA build of torch.
CUDA_ONLY_PREFIXES = ("nvidia-", "triton")
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
# A requirements input's own lines naming what it must serve (default: every platform and Python envkit supports).
PLATFORMS_DIRECTIVE = "# platforms:"
PYTHONS_DIRECTIVE = "# python:"


@dataclass(frozen=True)
class LockInputs:
    """Everything a lock is resolved from; its digest goes into the lock's header."""

    target: str
    requirements: tuple[str, ...]  # top-level, in install order
    platform: str  # uv's --python-platform, e.g. x86_64-manylinux_2_36; or "universal: linux/amd64 ..."
    python: str  # major.minor; a host lock's: the ones it must serve, space-separated
    index_url: str | None  # the target's pip_index_url; None: the installer's default index
    torch_index: str | None  # PyTorch's index for torch/torchvision; None: they come from index_url too
    torch_variant: str | None  # "cpu", "cu126": names torch_index in messages
    find_links: tuple[str, ...]
    # "target" (docker/<target>/requirements.lock) or "requirements" (a host environment's
    # requirements/<name>.in, whose file name is ``target``).
    source: str = "target"

    def torch_index_for(self, mirror: str | None) -> str | None:
        """Where torch and torchvision come from: ``mirror`` stands in for PyTorch's index only where the
        packages take torch from there at all."""
        return (mirror or self.torch_index) if self.torch_index else None

    def digest(self) -> str:
        fields = asdict(self)
        if fields["source"] == "target":
            fields.pop("source")  # target locks keep the digest they were made with
        text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def subject(self) -> str:
        """How messages name it: 'target cuda' or 'dev.in'."""
        return f"target {self.target}" if self.source == "target" else self.target


@dataclass(frozen=True)
class LockFile:
    inputs_sha256: str | None
    base_image: str | None  # as recorded: name:tag@sha256:... or name:tag (...)
    packages: dict[str, str]  # normalised name -> version
    unhashed: tuple[str, ...]  # requirement lines without a --hash
    sha256: str  # of the whole file: what images and results record
    packages_sha256: str | None = None  # as the header records it (None: written before envkit recorded it)
    body_sha256: str = ""  # of the requirement lines below the header as they are now
    platform: str | None = None  # uv's --python-platform it was resolved for, or "universal: ..." (a host lock)
    python: str | None = None  # major.minor it was resolved for (a host lock: those it must serve, space-separated)
    text: str = field(default="", repr=False)  # the whole file, as sha256 hashes it (a notebook carries it)
    # A host lock's coverage: (platform, python) -> the packages without a wheel there (empty: it installs there).
    wheels: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)

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


@dataclass(frozen=True)
class LockStatus:
    """What `envkit lock --check` and `envkit targets` say about one target's lock."""

    target: str  # a target's name, or a host environment's requirements/<name>.in
    path: str  # relative to the project
    lock: LockFile | None
    problems: tuple[str, ...] = ()
    relock: str = ""  # the command that (re)makes it

    @property
    def state(self) -> str:
        return "unlocked" if self.lock is None else "stale" if self.problems else "fresh"

    def line(self) -> str:
        if self.lock is None:
            return f"{self.target}: unlocked: {self.path} does not exist ({self.relock})"
        if self.problems:
            return f"{self.target}: stale: {self.path}: {'; '.join(self.problems)}"
        return f"{self.target}: fresh: {self.path} (sha256 {self.lock.sha256[:12]}, {len(self.lock.packages)} packages)"


def lock_path(config: ProjectConfig, name: str) -> Path:
    if config.target(name).is_notebook:  # no image folder: the lock sits beside its notebooks
        return config.output.notebook_folder(config.root, name) / LOCK_FILE
    return config.output.image_folder(config.root, name) / LOCK_FILE


def lock_inputs(target: Target) -> LockInputs:
    torch_index = torch_index_of(target.torch_variant)
    return LockInputs(
        target=target.name,
        requirements=tuple(target.requirements()),
        platform=_target_platform(target),
        python=target.python,
        index_url=target.pip_index_url,
        torch_index=torch_index,
        torch_variant=target.torch_variant,
        find_links=target.find_links,
    )


def _target_platform(target: Target) -> str:
    """What a target's lock is resolved for: uv's --python-platform for an image of one platform (a notebook
    runtime is Linux x86-64), or one universal lock, markers per platform, for an image of several: each
    architecture's build installs the entries of its own, natively. The universal resolution reads no glibc;
    the lock's check on each platform (resolve._served) takes the base image's."""
    platforms = target.platforms or ("linux/amd64",)
    if len(platforms) > 1:
        return UNIVERSAL + " ".join(platforms)
    return PLATFORMS[platforms[0]].uv_platform.format(manylinux=target_manylinux(target))


def target_manylinux(target: Target) -> str:
    """The manylinux tag the target's packages load with (2_36 for Debian 12's glibc 2.36)."""
    return _manylinux(target_glibc(target))


def torch_index_of(variant: str | None) -> str | None:
    """PyTorch's index for a torch build by its local version tag ("cpu", "cu126"), or None for the default index's.

    By the variant, not the kind: a torch_tpu tpu-vm target takes PyTorch's CPU build too.
    """
    from envkit.project.matrix import load_matrix

    matrix = load_matrix()
    if variant == matrix.cpu_local_version:
        return matrix.cpu_index_url
    if variant in matrix.cuda:
        return matrix.cuda[variant].index_url
    return None


@lru_cache(maxsize=1)
def _glibc_table() -> dict[str, str]:
    return load_yaml(GLIBC_PATH)["glibc"]


# The newest manylinux tag uv's --python-platform knows (uv 0.13: manylinux_2_40). A newer glibc
# (Debian 13's 2.41) loads every wheel of that tag, so locking for it only leaves out wheels that
# need the newer glibc itself.
UV_NEWEST_GLIBC = "2.40"


def _manylinux(glibc: str) -> str:
    newest = min(glibc, UV_NEWEST_GLIBC, key=lambda version: tuple(int(part) for part in version.split(".")))
    return newest.replace(".", "_")


def target_glibc(target: Target) -> str:
    """The glibc the target's packages load with: its base image's, or its notebook runtime's."""
    if target.is_notebook:
        from envkit.project.notebook_platforms import runtime_of

        return runtime_of(target).glibc
    return base_glibc(target)


def base_glibc(target: Target) -> str:
    """The glibc of the target's base OS, from the suffix of the base image's tag."""
    return _image_glibc(target.base_image, f"target {target.name}")


def _image_glibc(base_image: str, subject: str) -> str:
    tag = base_image.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")[2]
    for suffix, glibc in _glibc_table().items():
        if tag.endswith(suffix):
            return glibc
    raise EnvkitError(
        f"{subject}: cannot tell the glibc of base image {base_image}; envkit knows tags ending "
        f"in {', '.join(_glibc_table())} ({GLIBC_PATH.name} lists them)"
    )


def requirements_inputs(path: Path) -> LockInputs:
    """A host environment (requirements/dev.in -> dev.lock): one universal lock for the platforms and Pythons
    the input names (every one envkit supports unless its `# platforms:` / `# python:` lines say fewer)."""
    requirements, platforms, pythons = _requirement_list(path)
    # torch==2.13.0+cpu names its build, and so PyTorch's index for it, as a target's torch_variant does.
    labels = {r.split("+", 1)[1] for r in requirements if "+" in r and requirement_name(r) in TORCH_INDEX_PACKAGES}
    if len(labels) > 1:
        raise EnvkitError(
            f"{path}: torch and torchvision name different builds ({', '.join(sorted(labels))}); name one"
        )
    variant = labels.pop() if labels else None
    torch_index = torch_index_of(variant)
    if variant and torch_index is None:
        raise EnvkitError(f"{path}: no PyTorch index in envkit's matrix serves the +{variant} build")
    return LockInputs(
        target=path.name,
        requirements=tuple(requirements),
        platform=UNIVERSAL + " ".join(platforms),
        python=" ".join(pythons),
        index_url=None,
        torch_index=torch_index,
        torch_variant=variant,
        find_links=(),
        source="requirements",
    )


def _check_requirement(requirement: str, where: str) -> None:
    from packaging.requirements import InvalidRequirement

    try:
        requirement_name(requirement)
    except InvalidRequirement as exc:
        reason = str(exc).splitlines()[0]  # packaging's message goes on with the line and a caret under it
        raise EnvkitError(f"{where}: {requirement}: not a requirement ({reason}), e.g. tqdm>=4.60") from None


def requirements_lock_path(path: Path) -> Path:
    return path.with_suffix(".lock")


def host_manylinux() -> str:
    """The manylinux tag a host lock's Linux wheels are checked against: the glibc of the python base image's OS
    (Debian 12, what CI runs on); a newer glibc loads them too."""
    from envkit.project import kinds
    from envkit.project.config import DEFAULT_PYTHON

    base = next(iter(kinds.load_kinds().values())).python_base_image.format(python=DEFAULT_PYTHON)
    return _manylinux(_image_glibc(base, "host environments"))


def _requirement_list(path: Path) -> tuple[list[str], list[str], list[str]]:
    """(requirements, platforms, Pythons) of a requirements input."""
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise EnvkitError(f"{path} not found: give a requirements input such as requirements/dev.in") from None
    except OSError as exc:
        raise EnvkitError(f"cannot read {path}: {exc.strerror or exc}") from None
    except Refused as exc:
        raise EnvkitError(exc.at(path)) from None
    if path.suffix == ".lock":
        raise EnvkitError(f"{path}: this is a lock; give the requirements it is made from (a .in or .txt file)")
    found = []
    platforms, pythons = list(PLATFORMS), list(PYTHONS)
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith((PLATFORMS_DIRECTIVE, PYTHONS_DIRECTIVE)):
            directive, names = line.split(":", 1)[0], line.split(":", 1)[1].split()
            if not names:
                raise EnvkitError(f"{path}:{number}: {directive}: name at least one")
            if line.startswith(PLATFORMS_DIRECTIVE):
                check_names(names, [], f"{path}:{number}")
                platforms = sorted(set(names), key=list(PLATFORMS).index)
            else:
                check_names([], names, f"{path}:{number}")
                pythons = sorted(set(names), key=PYTHONS.index)
            continue
        requirement = line.split(" #", 1)[0].strip()
        if requirement.startswith("-"):
            raise EnvkitError(
                f"{path}:{number}: {requirement.split()[0]}: only requirements belong here; "
                f"indexes and includes are not locked"
            )
        if requirement and not requirement.startswith("#"):
            _check_requirement(requirement, f"{path}:{number}")
            found.append(requirement)
    if not found:
        raise EnvkitError(f"{path}: no requirements in it")
    return found, platforms, pythons


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
        body_digest(_body(text)),
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


def body_digest(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def hand_edited(lock: LockFile) -> str | None:
    """Why the packages are not the ones envkit lock wrote, or None when they are."""
    if lock.packages_sha256 is not None and lock.packages_sha256 != lock.body_sha256:
        return "its packages were edited after it was locked (the packages-sha256 of its header no longer matches)"
    return None


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
    if inputs.source == "target":
        what, relock, name = (
            f'target "{inputs.target}"',
            f"envkit.yaml, then run `envkit lock --target {inputs.target}`",
            LOCK_FILE,
        )
    else:
        name = requirements_lock_path(Path(inputs.target)).name
        what, relock = inputs.target, f"{inputs.target}, then run `envkit lock --requirements` on it"
    lines = [
        f"# envkit lock for {what}: every package pinned by version and sha256.",
        f"# Do not edit: change {relock}.",
        f"# Install: pip install --require-hashes --no-deps --only-binary=:all: -r {name}",
        f"{INPUTS_LINE}{inputs.digest()}",
        f"{PACKAGES_LINE}{body_digest(body)}",
        f"{PLATFORM_LINE}{inputs.platform}, python {inputs.python}",
        *([f"{IMAGE_PLATFORMS_LINE}{' '.join(platforms)}"] if platforms else []),
        *wheels_lines(wheels or {}),
        f"# indexes: {indexes}",
        f"# top-level: {' '.join(inputs.requirements)}",
        *([f"{BASE_LINE}{base_image}"] if base_image else []),
        f"# resolved with: {command}",
    ]
    return "\n".join(lines) + "\n"


def lock_status(config: ProjectConfig, name: str) -> LockStatus:
    """Fresh, stale (and why) or unlocked, offline: from the lock and the config alone."""
    target = config.target(name)
    path = lock_path(config, name)
    lock = read_lock(path)
    relock = f"envkit lock --target {name}"
    relative = path.relative_to(config.root).as_posix()
    if lock is None:
        return LockStatus(name, relative, None, relock=relock)
    problems = []
    try:
        expected = lock_inputs(target).digest()
    except EnvkitError as exc:  # the config can no longer be locked at all (an unknown base OS, say)
        problems.append(str(exc))
        expected = None
    problems += _problems(lock, expected, relock)
    if target.kind == "cpu":
        cuda_only = sorted(pkg for pkg in lock.packages if pkg.startswith(CUDA_ONLY_PREFIXES))
        if cuda_only:
            problems.append(f"a cpu lock with CUDA packages: {', '.join(cuda_only)}")
    return LockStatus(name, relative, lock, tuple(problems), relock)


def requirements_status(path: Path) -> LockStatus:
    """The same for a host environment: requirements/<name>.in and its <name>.lock."""
    lock_file = requirements_lock_path(path)
    lock = read_lock(lock_file)
    relock = f"envkit lock --requirements {path}"
    problems = () if lock is None else tuple(_problems(lock, requirements_inputs(path).digest(), relock))
    return LockStatus(str(path), str(lock_file), lock, problems, relock)


def _problems(lock: LockFile, inputs_sha256: str | None, relock: str) -> list[str]:
    """Why a lock is stale: changed inputs (None: not known), a header from before packages-sha256, edits, no hashes."""
    problems = []
    if inputs_sha256 is not None and lock.inputs_sha256 != inputs_sha256:
        problems.append(f"its inputs changed since it was locked ({relock})")
    if lock.packages_sha256 is None:
        problems.append(f"its header records no packages-sha256 (an older envkit wrote it): {relock}")
    elif edited := hand_edited(lock):
        problems.append(f"{edited}: {relock}")
    if lock.unhashed:
        problems.append(f"no --hash for {', '.join(lock.unhashed)}")
    return problems

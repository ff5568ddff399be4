"""Locks: docker/<target>/requirements.lock, every package pinned by version and sha256.

This module holds what a lock is resolved from (LockInputs), the file's format
and `envkit lock --check`; it runs offline and imports neither uv nor docker.
envkit/lock/resolve.py makes locks with uv.

A lock is a pip requirements file (`name==version` and its `--hash=sha256:`
lines, no URLs) under a comment header. The header records the sha256 of the
inputs, so a changed top-level pin, index setting, platform or Python shows up
as a stale lock without contacting any index, and the sha256 of the packages
below it, so a hand-edited lock shows too.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from envkit.project import NOTEBOOKS
from envkit.project.config import ProjectConfig, Target
from envkit.errors import EnvkitError
from envkit.project.matrix import load_matrix
from envkit.project.datafile import DATA_DIR
from envkit.support.bounded_load import Refused, load_yaml, read_stream

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


@dataclass(frozen=True)
class LockInputs:
    """Everything a lock is resolved from; its digest goes into the lock's header."""

    target: str
    requirements: tuple[str, ...]  # top-level, in install order
    platform: str  # uv's --python-platform, e.g. x86_64-manylinux_2_36
    python: str
    index_url: str | None  # the target's pip_index_url; None: the installer's default index
    torch_index: str | None  # PyTorch's index for torch/torchvision; None: they come from index_url too
    torch_variant: str | None  # "cpu", "cu126": names torch_index in messages
    find_links: tuple[str, ...]

    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class LockFile:
    inputs_sha256: str | None
    base_image: str | None  # as recorded: name:tag@sha256:... or name:tag (...)
    packages: dict[str, str]  # normalised name -> version
    unhashed: tuple[str, ...]  # requirement lines without a --hash
    sha256: str  # of the whole file: what images and results record
    packages_sha256: str | None = None  # as the header records it (None: written before envkit recorded it)
    body_sha256: str = ""  # of the requirement lines below the header as they are now


@dataclass(frozen=True)
class LockStatus:
    """What `envkit lock --check` and `envkit targets` say about one target's lock."""

    target: str
    path: str  # relative to the project
    lock: LockFile | None
    problems: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        return "unlocked" if self.lock is None else "stale" if self.problems else "fresh"

    def line(self) -> str:
        if self.lock is None:
            return f"{self.target}: unlocked: {self.path} does not exist (envkit lock --target {self.target})"
        if self.problems:
            return f"{self.target}: stale: {self.path}: {'; '.join(self.problems)}"
        return f"{self.target}: fresh: {self.path} (sha256 {self.lock.sha256[:12]}, {len(self.lock.packages)} packages)"


def lock_path(config: ProjectConfig, name: str) -> Path:
    if config.target(name).is_notebook:  # no docker/ directory: the lock sits beside its notebooks
        return config.root / NOTEBOOKS / name / LOCK_FILE
    return config.root / "docker" / name / LOCK_FILE


def lock_inputs(target: Target) -> LockInputs:
    torch_index = _torch_index(target)
    user_extras = [url for url in target.pip_extra_index_urls if url != torch_index]
    if user_extras:
        raise EnvkitError(
            f"target {target.name}: pip_extra_index_urls {', '.join(user_extras)} would let any package come from "
            f"either index; a lock takes each package from one index: drop them, or set pip_index_url to a mirror"
        )
    return LockInputs(
        target=target.name,
        requirements=tuple(target.requirements()),
        platform=f"x86_64-manylinux_{_manylinux(target_glibc(target))}",
        python=target.python,
        index_url=target.pip_index_url,
        torch_index=torch_index,
        torch_variant=target.torch_variant,
        find_links=target.find_links,
    )


def _torch_index(target: Target) -> str | None:
    """PyTorch's index for the target's torch build (by its local version tag), or None for PyPI's build.

    By the variant, not the kind: a torch_tpu tpu-vm target takes PyTorch's CPU build too.
    """
    matrix = load_matrix()
    if target.torch_variant == matrix.cpu_local_version:
        return matrix.cpu_index_url
    if target.torch_variant in matrix.cuda:
        return matrix.cuda[target.torch_variant].index_url
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
    tag = target.base_image.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")[2]
    for suffix, glibc in _glibc_table().items():
        if tag.endswith(suffix):
            return glibc
    raise EnvkitError(
        f"target {target.name}: cannot tell the glibc of base image {target.base_image}; envkit knows tags ending "
        f"in {', '.join(_glibc_table())} ({GLIBC_PATH.name} lists them)"
    )


def normalise(name: str) -> str:
    """PEP 503 normal form of a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> LockFile | None:
    """The parsed lock, or None when the target has none."""
    try:
        with path.open("rb") as stream:
            data = read_stream(stream)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise EnvkitError(f"cannot read {path}: {exc.strerror or exc}") from None
    except Refused as exc:
        raise EnvkitError(exc.at(path)) from None
    inputs = base = recorded_packages = None
    packages: dict[str, str] = {}
    unhashed = []
    text = data.decode("utf-8", errors="replace")
    for line in _requirement_lines(text):
        if line.startswith(INPUTS_LINE):
            inputs = line[len(INPUTS_LINE) :].strip()
        elif line.startswith(PACKAGES_LINE):
            recorded_packages = line[len(PACKAGES_LINE) :].strip()
        elif line.startswith(BASE_LINE):
            base = line[len(BASE_LINE) :].strip()
        elif line and not line.startswith("#"):
            requirement, *options = line.split()
            name, _, version = requirement.partition("==")
            packages[normalise(name.split("[", 1)[0])] = version.split(";", 1)[0]
            if not any(option.startswith("--hash=sha256:") for option in options):
                unhashed.append(requirement)
    return LockFile(inputs, base, packages, tuple(unhashed), hashlib.sha256(data).hexdigest(), recorded_packages,
                    body_digest(_body(text)))


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


def lock_header(inputs: LockInputs, base_image: str, command: str, body: str) -> str:
    if inputs.torch_index:
        indexes = f"torch, torchvision from PyTorch's {inputs.torch_variant} index; everything else from "
    else:
        indexes = "every package from "
    indexes += "the target's pip_index_url" if inputs.index_url else "the default index"
    lines = [
        f'# envkit lock for target "{inputs.target}": every package pinned by version and sha256.',
        f"# Do not edit: change envkit.yaml, then run `envkit lock --target {inputs.target}`.",
        f"# Install: pip install --require-hashes --no-deps --only-binary=:all: -r {LOCK_FILE}",
        f"{INPUTS_LINE}{inputs.digest()}",
        f"{PACKAGES_LINE}{body_digest(body)}",
        f"# platform: {inputs.platform}, python {inputs.python}",
        f"# indexes: {indexes}",
        f"# top-level: {' '.join(inputs.requirements)}",
        f"{BASE_LINE}{base_image}",
        f"# resolved with: {command}",
    ]
    return "\n".join(lines) + "\n"


def lock_status(config: ProjectConfig, name: str) -> LockStatus:
    """Fresh, stale (and why) or unlocked, offline: from the lock and the config alone."""
    target = config.target(name)
    path = lock_path(config, name)
    lock = read_lock(path)
    relative = path.relative_to(config.root).as_posix()
    if lock is None:
        return LockStatus(name, relative, None)
    problems = []
    try:
        changed = lock.inputs_sha256 != lock_inputs(target).digest()
    except EnvkitError as exc:  # the config can no longer be locked at all (an unknown base OS, say)
        problems.append(str(exc))
        changed = False
    if changed:
        problems.append(f"its inputs changed since it was locked (envkit lock --target {name})")
    if lock.packages_sha256 is None:
        problems.append(f"its header records no packages-sha256 (an older envkit wrote it): envkit lock --target {name}")
    elif edited := hand_edited(lock):
        problems.append(f"{edited}: envkit lock --target {name}")
    if lock.unhashed:
        problems.append(f"no --hash for {', '.join(lock.unhashed)}")
    if target.kind == "cpu":
        cuda_only = sorted(pkg for pkg in lock.packages if pkg.startswith(CUDA_ONLY_PREFIXES))
        if cuda_only:
            problems.append(f"a cpu lock with CUDA packages: {', '.join(cuda_only)}")
    return LockStatus(name, relative, lock, tuple(problems))

"""`envkit lock --check` and `envkit targets`: whether a target's lock, or a host environment's, is fresh, stale (and
why) or absent, offline: from the lock (envkit/lock/lockfile.py) and the inputs it was made from
(envkit/lock/inputs.py) alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envkit.errors import EnvkitError
from envkit.lock.header import edited_header
from envkit.lock.inputs import LockInputs, lock_inputs, requirements_inputs
from envkit.lock.lockfile import LockFile, hand_edited, lock_path, read_lock, requirements_lock_path

if TYPE_CHECKING:
    from envkit.project.config import ProjectConfig

# A cpu image that pulls these has resolved PyPI's CUDA build of torch.
CUDA_ONLY_PREFIXES = ("nvidia-", "triton")
# NVIDIA's pure-Python packages that any project may use on a CPU (nvidia-ml-py: NVML's bindings, which dvclive
# pulls in through pynvml): no CUDA build of torch brought them.
NOT_CUDA_BUILDS = frozenset({"nvidia-ml-py"})


def cuda_only_packages(packages) -> list[str]:
    """The packages of a lock that only a CUDA build of torch brings, sorted."""
    return sorted(pkg for pkg in packages if pkg.startswith(CUDA_ONLY_PREFIXES) and pkg not in NOT_CUDA_BUILDS)


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
        inputs = lock_inputs(target)
    except EnvkitError as exc:  # the config can no longer be locked at all (an unknown base OS, say)
        problems.append(str(exc))
        inputs = None
    problems += _problems(lock, inputs, relock, target.platforms)
    if target.kind == "cpu":
        cuda_only = cuda_only_packages(lock.packages)
        if cuda_only:
            problems.append(f"a cpu lock with CUDA packages: {', '.join(cuda_only)}")
    return LockStatus(name, relative, lock, tuple(problems), relock)


def requirements_status(path: Path) -> LockStatus:
    """The same for a host environment: requirements/<name>.in and its <name>.lock."""
    lock_file = requirements_lock_path(path)
    lock = read_lock(lock_file)
    relock = f"envkit lock --requirements {path}"
    problems = () if lock is None else tuple(_problems(lock, requirements_inputs(path), relock))
    return LockStatus(str(path), str(lock_file), lock, problems, relock)


def _problems(lock: LockFile, inputs: LockInputs | None, relock: str, platforms: tuple[str, ...] = ()) -> list[str]:
    """Why a lock is stale: changed inputs (None: not known), a header from before packages-sha256, edits of its
    packages or its header, no hashes."""
    problems = []
    changed = inputs is not None and lock.inputs_sha256 != inputs.digest()
    if changed:
        problems.append(f"its inputs changed since it was locked ({relock})")
    if lock.packages_sha256 is None:
        problems.append(f"its header records no packages-sha256 (an older envkit wrote it): {relock}")
    elif edited := hand_edited(lock) or (inputs is not None and not changed and edited_header(lock, inputs, platforms)):
        problems.append(f"{edited}: {relock}")
    if lock.unhashed:
        problems.append(f"no --hash for {', '.join(lock.unhashed)}")
    return problems

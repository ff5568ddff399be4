"""What a lock is resolved from (LockInputs): a target's requirements, platform, Python and indexes
(lock_inputs), or a host environment's requirements/<name>.in (requirements_inputs). The lock's header records
their digest, so a changed input shows as a stale lock without contacting any index (envkit/lock/status.py).
"""

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from envkit.errors import EnvkitError
from envkit.lock.host_platforms import PLATFORMS, PYTHONS, check_names
from envkit.lock.lockfile import UNIVERSAL
from envkit.lock.manylinux import target_manylinux
from envkit.project.requirement import requirement_name, unreadable
from envkit.support.bounded_load import Refused, read_text

if TYPE_CHECKING:
    from envkit.project.config import Target

# The only packages that may come from PyTorch's own index (its +cpu/+cuXYZ builds);
# everything else comes from the default index, so no name can be served by both.
TORCH_INDEX_PACKAGES = ("torch", "torchvision")

# A requirements input's own lines naming what it must serve (default: every platform and Python envkit supports).
PLATFORMS_DIRECTIVE = "# platforms:"
PYTHONS_DIRECTIVE = "# python:"


class LockInputs(NamedTuple):
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
        fields = self._asdict()
        if fields["source"] == "target":
            fields.pop("source")  # target locks keep the digest they were made with
        text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def subject(self) -> str:
        """How messages name it: 'target cuda' or 'dev.in'."""
        return f"target {self.target}" if self.source == "target" else self.target


def lock_inputs(target: "Target") -> LockInputs:
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


def _target_platform(target: "Target") -> str:
    """What a target's lock is resolved for: uv's --python-platform for an image of one platform (a notebook
    runtime is Linux x86-64), or one universal lock, markers per platform, for an image of several: each
    architecture's build installs the entries of its own, natively. The universal resolution reads no glibc;
    the lock's check on each platform (resolve._served) takes the base image's."""
    platforms = target.platforms or ("linux/amd64",)
    if len(platforms) > 1:
        return UNIVERSAL + " ".join(platforms)
    return PLATFORMS[platforms[0]].uv_platform.format(manylinux=target_manylinux(target))


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
    reason = unreadable(requirement)
    if reason is not None:
        raise EnvkitError(f"{where}: {requirement}: not a requirement ({reason}), e.g. tqdm>=4.60")


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

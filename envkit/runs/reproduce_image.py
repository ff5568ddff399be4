"""Where `envkit reproduce` runs an image run of a record again (issue 43 §2), in this order: the image by digest
from the registry it was pushed to (the record's ``image`` when it names a digest, else the revision's
docker/<target>/pushed.json entry of the record's image ID or digest); else a rebuild from the lock at the
revision, proved the same by what the record lists; else, without an engine, a host venv from that lock. Each
choice says what it used. A record made on no lock, or on another lock than the revision's, cannot promise the
same environment: one line, exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.image.diff import compare
from envkit.image.inventory import Inventory, from_environment
from envkit.image.pushed import pushes
from envkit.lock.lockfile import lock_path
from envkit.project.config import ProjectConfig
from envkit.support.bounded_load import sha256

PULL, REBUILD, VENV = "pull", "rebuild", "venv"
# What a rebuilt image is proved the same by: what a record lists of it (no apt packages, files or labels; its
# versions are worded apart: a label's torch against the record's torch.__version__).
PROVED_BY = ("python packages",)


@dataclass(frozen=True)
class Choice:
    how: str  # PULL, REBUILD or VENV
    reference: str | None  # PULL: the reference by digest; otherwise None
    lock: Path | None  # the lock at the revision (REBUILD, VENV)
    said: str  # what it used, in one line


def _pulled(image: str | None, image_id: str | None, digest: str | None, folder: Path, target: str) -> str | None:
    """The reference that pulls exactly the recorded image, where one is known."""
    if image and "@sha256:" in image:
        return image
    for pushed in pushes(folder, target):
        if (image_id and pushed.image_id == image_id) or (digest and pushed.digest == digest):
            return pushed.reference
    return None


def choose(environment: dict, config: ProjectConfig, target: str, engine: bool) -> Choice:
    """How an image run whose record's environment is ``environment`` runs again from ``config`` (the project at
    the revision) on ``target``; ``engine``: whether a Docker engine answers here."""
    folder = config.output.image_folder(config.root, target)
    reference = _pulled(
        environment.get("image"), environment.get("image_id"), environment.get("image_digest"), folder, target
    )
    if reference is not None and engine:
        return Choice(PULL, reference, None, f"the recorded image by digest: {reference}")
    recorded = environment.get("lock_sha256")
    lock = lock_path(config, target)
    if recorded is None:
        raise EnvkitError(
            f"the record's image {environment.get('image')} was built unlocked and no push of it is known here: "
            "reproduce cannot promise the same environment (lock the target and share a locked run)"
        )
    present = sha256(lock) if lock.is_file() else None
    if present != recorded:
        now = f"its lock is {present[:12]}" if present else "it has no lock"
        raise EnvkitError(
            f"the record ran on lock {recorded[:12]}, but at its revision {now} ({lock.relative_to(config.root)}): "
            "reproduce cannot promise the same environment"
        )
    missing = f" (its push is not pulled without an engine: {reference})" if reference else ""
    if engine:
        return Choice(REBUILD, None, lock, f"a rebuild of {target} from its lock {recorded[:12]} at the revision")
    return Choice(VENV, None, lock, f"no Docker engine here: a host venv from the lock {recorded[:12]}{missing}")


def proof(rebuilt: Inventory, environment: dict) -> tuple[str, ...]:
    """What the rebuilt image holds otherwise than the record lists (verify's rule, on what a record holds: the
    Python distributions by name and version), in envkit diff's words, one line each: none when it is the same."""
    recorded = from_environment("the record", environment)
    sections = [section for section in compare(recorded, rebuilt) if section.title in PROVED_BY]
    return tuple(f"{section.title}: {change}" for section in sections for change in section.changes)

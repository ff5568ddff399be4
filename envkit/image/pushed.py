"""What `envkit push` left in registries: for each repository and tag, the manifest digest and image ID.

The record is <output.images>/<target>/pushed.json, beside the target's Dockerfile and lock,
and is committed like the lock: a collaborator on another machine (a Slurm login
node, a laptop with kubectl) launches exactly the image that was pushed, by digest,
with no engine and no registry lookup. A tag in a registry moves on the next push;
the digest recorded here does not. Schema: envkit/data/pushed.schema.json.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.project.datafile import DATA_DIR, load_checked
from envkit.support.atomic import write_text_atomic
from envkit.support.bounded_load import load_json

RECORD_FILE = "pushed.json"
FORMAT = 1
SCHEMA_PATH = DATA_DIR / "pushed.schema.json"


@dataclass(frozen=True)
class Pushed:
    repository: str  # REGISTRY[/PATH]/envkit-<target>
    tag: str
    digest: str  # sha256:<hex> of the manifest the registry stored
    image_id: str  # sha256:<hex> of the image config: the ID every engine reports
    # A manifest list's: (platform, image ID) of each image in it, whose digest ``digest`` is; () for one image.
    platforms: tuple[tuple[str, str], ...] = ()

    @property
    def reference(self) -> str:
        """The reference that pulls exactly this image, wherever the tag has moved since."""
        return f"{self.repository}@{self.digest}"


def record_path(folder: Path) -> Path:
    """The record in ``folder``, the target's rendered files (ProjectConfig.output.image_folder)."""
    return folder / RECORD_FILE


def _read(path: Path, target_name: str) -> dict:
    # Only a record that is truly absent means "never pushed": a directory, a FIFO or a
    # dangling symlink in its place is refused by the read, as a push could not record there.
    if not path.exists() and not path.is_symlink():
        return {"format": FORMAT, "target": target_name, "images": {}}
    document = load_checked(path, SCHEMA_PATH, load_json)
    if document["target"] != target_name:
        raise EnvkitError(
            f"{path} records pushes of target {document['target']!r}, not {target_name!r}: move or delete it"
        )
    return document


def record(folder: Path, target_name: str, pushes: list[Pushed]) -> Path:
    """Add ``pushes`` to the target's record (a tag pushed again is replaced); the whole file or none of it."""
    path = record_path(folder)
    document = _read(path, target_name)
    for pushed in pushes:
        entry = {"digest": pushed.digest, "image_id": pushed.image_id}
        if pushed.platforms:
            entry["platforms"] = {platform: {"image_id": image_id} for platform, image_id in pushed.platforms}
        document["images"].setdefault(pushed.repository, {})[pushed.tag] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(document, indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise EnvkitError(f"pushed, but cannot record the digest in {path}: {exc.strerror}", exit_code=1) from None
    return path


def _pushed(repository: str, tag: str, entry: dict) -> Pushed:
    platforms = tuple((platform, each["image_id"]) for platform, each in entry.get("platforms", {}).items())
    return Pushed(repository, tag, entry["digest"], entry["image_id"], platforms)


def lookup(folder: Path, target_name: str, repository: str, tag: str) -> Pushed | None:
    """What the last push of ``repository:tag`` recorded, or None when it was never pushed from this project."""
    entry = _read(record_path(folder), target_name)["images"].get(repository, {}).get(tag)
    return None if entry is None else _pushed(repository, tag, entry)


def pushes(folder: Path, target_name: str) -> list[Pushed]:
    """Every push the target's record holds, by repository and tag (envkit reproduce finds a run's image here)."""
    images = _read(record_path(folder), target_name)["images"]
    return [
        _pushed(repository, tag, images[repository][tag])
        for repository in sorted(images)
        for tag in sorted(images[repository])
    ]

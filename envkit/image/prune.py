"""Remove a target's superseded images: every build of new content adds a tag that stays.

Only envkit's own names are removed (``envkit-<target>:<content hash>``, and untagged
leftovers labelled with the target). The image tagged ``latest`` is never touched, nor
the ``keep`` newest before it; an image that still has other names (a registry name
from ``envkit push``) loses only envkit's name, so nothing another tool relies on goes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from envkit.errors import EnvkitError
from envkit.image.build import LATEST, repository
from envkit.support.docker_client import connect_docker, docker_sdk

REMOVED, UNTAGGED, KEPT, WOULD_REMOVE = "removed", "untagged", "kept", "would remove"


@dataclass(frozen=True)
class OldImage:
    image_id: str
    names: tuple[str, ...]  # envkit's names for it; empty for an untagged leftover
    other_names: tuple[str, ...]  # names envkit did not give it, which keep it alive
    created: int  # seconds since the epoch, as the engine lists it
    size_bytes: int

    @property
    def label(self) -> str:
        return ", ".join(self.names) or f"untagged {self.image_id.removeprefix('sha256:')[:12]}"


@dataclass(frozen=True)
class Outcome:
    image: OldImage
    state: str  # one of REMOVED, UNTAGGED, KEPT, WOULD_REMOVE
    detail: str = ""  # UNTAGGED: the names left; KEPT: the engine's reason


def old_images(client, target_name: str, keep: int) -> list[OldImage]:
    """The target's images other than ``latest`` and the ``keep`` newest, newest first."""
    repo = repository(target_name)
    listed = client.api.images(name=repo) + client.api.images(
        filters={"dangling": True, "label": f"io.envkit.target={target_name}"}
    )
    by_id = {entry["Id"]: entry for entry in listed}
    current = {entry["Id"] for entry in by_id.values() if f"{repo}:{LATEST}" in (entry.get("RepoTags") or ())}
    found = []
    for image_id, entry in by_id.items():
        if image_id in current:
            continue
        # The engine lists an untagged image as "<none>:<none>" (or not at all, by version).
        tags = [t for t in entry.get("RepoTags") or () if t != "<none>:<none>"]
        ours = tuple(sorted(t for t in tags if t.startswith(f"{repo}:")))
        others = tuple(sorted(t for t in tags if not t.startswith(f"{repo}:")))
        found.append(OldImage(image_id, ours, others, int(entry.get("Created", 0)), int(entry.get("Size", 0))))
    # Ties in the engine's one-second clock fall back to the id, so the order is stable.
    found.sort(key=lambda image: (image.created, image.image_id), reverse=True)
    return found[keep:]


def prune(target_name: str, keep: int = 0, dry_run: bool = False) -> Iterator[Outcome]:
    """Remove the target's old images one at a time, yielding what happened to each."""
    client = connect_docker()
    docker = docker_sdk()
    for image in old_images(client, target_name, keep):
        if dry_run:
            yield Outcome(image, WOULD_REMOVE)
            continue
        try:
            for reference in image.names or (image.image_id,):
                client.api.remove_image(reference)
        except docker.errors.APIError as exc:
            # 409: a container (even a stopped one) was made from it; the engine says which.
            if exc.status_code == 409:
                yield Outcome(image, KEPT, str(exc.explanation or exc))
                continue
            raise EnvkitError(
                f"the engine could not remove {image.label}: {exc.explanation or exc}", exit_code=1
            ) from None
        yield Outcome(image, UNTAGGED if image.other_names else REMOVED, ", ".join(image.other_names))

"""The digest of a target's base image, as its registry (or the local engine) knows it.

A tag can be moved to another image; a digest cannot. `envkit lock` records the
digest the base's tag points to, and refuses a configured `name:tag@sha256:...`
whose digest is not the tag's. The registry is asked through the Docker engine
(its distribution endpoint, with the engine's credentials and mirrors); an image
the engine pulled or pushed also knows its digest locally.
"""

from typing import NamedTuple

from envkit.errors import EnvkitError


class BaseDigest(NamedTuple):
    reference: str  # name:tag, no digest
    digest: str | None  # sha256:..., None when nothing could tell
    note: str | None  # why it is unresolved or unverified, for a warning line

    def recorded(self) -> str:
        """The text a lock records for this base."""
        if self.digest:
            return f"{self.reference}@{self.digest}"
        return f"{self.reference} (no digest found: pinned by tag only)"


def split_reference(image: str) -> tuple[str, str | None]:
    """'name:tag@sha256:...' -> ('name:tag', 'sha256:...')."""
    reference, _, digest = image.partition("@")
    return reference, digest or None


def resolve_base(target_name: str, image: str) -> BaseDigest:
    """The digest of the image's tag; EnvkitError when a configured digest is not the tag's."""
    reference, configured = split_reference(image)
    found, why = _tag_digest(reference)
    if configured is None:
        return BaseDigest(reference, found, None if found else f"no digest for {reference}: {why}")
    if found is None:
        return BaseDigest(reference, configured, f"digest of {reference} not verified: {why}")
    if found != configured:
        raise EnvkitError(
            f"target {target_name}: base_image {image} names digest {configured}, but {reference} is {found}; "
            f"set base_image to {reference}@{found} or drop the digest"
        )
    return BaseDigest(reference, found, None)


def _tag_digest(reference: str) -> tuple[str | None, str]:
    from envkit.support.docker_client import connect_docker, docker_sdk

    try:
        client = connect_docker()
    except EnvkitError as exc:
        return None, str(exc)
    errors = docker_sdk().errors
    try:
        return client.images.get_registry_data(reference).id, ""
    except errors.DockerException as exc:
        why = f"the registry did not answer ({_short(exc)})"
    try:
        repository = reference.rsplit(":", 1)[0] if ":" in reference.rsplit("/", 1)[-1] else reference
        local = client.images.get(reference).attrs.get("RepoDigests") or []
    except errors.DockerException:
        return None, why
    for repo_digest in local:
        name, _, digest = repo_digest.partition("@")
        if name == repository:
            return digest, ""
    return None, why


def _short(exc: Exception) -> str:
    return " ".join(str(getattr(exc, "explanation", None) or exc).split())[:160]

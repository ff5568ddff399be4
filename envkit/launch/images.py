"""Which image a launch runs, and the identity its results will carry.

Every node must run the same bytes, and the results must say which: a tag is a
name that the next push moves, so a launch through a registry runs the digest
that `envkit push` recorded (image/pushed.py), REGISTRY/envkit-<target>@sha256:...,
and passes the image ID in as ENVKIT_IMAGE_ID next to ENVKIT_IMAGE. In order:
  --image REF          REF as given (the user's choice; no ID is known)
  --image-tarball F    the tag and image ID in envkit save's manifest beside F
  --registry R         the recorded digest of R/envkit-<target>:TAG; never pushed: one line
  (none)               the local envkit-<target>:TAG, which every node must already have
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.launch.spec import Option


def _absolute(text: str) -> str:
    return str(Path(text).resolve())


# The engines that load envkit save's tarball on their nodes declare it (slurm, tpu-pod); choose reads it too.
TARBALL = Option(
    "image_tarball",
    "slurm podman/apptainer, tpu-pod: envkit save's .tar.gz (its .manifest.json beside it names the image)",
    type=_absolute,
)


@dataclass(frozen=True)
class LaunchImage:
    reference: str  # what the nodes run
    image_id: str | None = None  # sha256:<hex>, when known before the job starts


def choose(
    folder: Path,
    target_name: str,
    *,
    tag: str,
    image: str | None = None,
    registry: str | None = None,
    tarball: str | None = None,
) -> LaunchImage:
    from envkit.image.build import LATEST, repository
    from envkit.image.names import check_reference, check_registry, check_tag

    if image:
        return LaunchImage(check_reference(image))
    if tarball:
        from envkit.image.archive import manifest_for, read_manifest

        path = manifest_for(Path(tarball))
        if not path.is_file():
            raise EnvkitError(
                f"--image-tarball {tarball}: no {path.name} beside it; the image's name and ID come from "
                f"the manifest that envkit save writes with the tarball"
            )
        manifest = read_manifest(path)
        return LaunchImage(manifest["tag"], manifest["image_id"])
    local = f"{repository(target_name)}:{check_tag(tag)}"
    if not registry:
        return LaunchImage(local)
    check_registry(registry)
    from envkit.image.pushed import lookup, record_path

    pushed = lookup(folder, target_name, f"{registry}/{repository(target_name)}", tag)
    if pushed is None:
        raise EnvkitError(
            f"launch by digest: {local} was never pushed to {registry} (no entry in {record_path(folder)}); "
            f"run envkit push {target_name} --registry {registry}" + (f" --tag {tag}" if tag != LATEST else "")
        )
    return LaunchImage(pushed.reference, pushed.image_id)

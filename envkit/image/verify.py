"""`envkit verify TARGET`: rebuild from scratch and prove the environment is the same.

The current image and a `--no-cache` rebuild of the same inputs are compared by their
manifest digests when the builder keeps one and gives identical ones (buildah with
--timestamp): equal digests are the same bytes, and nothing else needs reading.
Otherwise (the Docker engine, or digests that differ) they are compared by their
inventories: Python distributions (name, version and the hash of their RECORD, which
lists every installed file with its hash), dpkg packages and versions, and every
file's content digest (mtimes ignored). "Reproduced" then needs the same packages and
0 files differing in content.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.image.diff import dict_changes, file_changes, record_changes
from envkit.image.inventory import Inventory, from_engine_image, from_saved_tarball, side_by_side

# The differing files a report names before it only counts them.
FILES_SHOWN = 20
SCRATCH_TAG = "verify"


@dataclass(frozen=True)
class Verdict:
    current: str  # what was compared, as the report names it: "envkit-cpu:<tag> (sha256:<id>)"
    rebuilt: str
    digests: tuple[str | None, str | None] = (None, None)  # manifest digests, where the builder keeps them
    inventories: tuple[Inventory, Inventory] | None = None  # read when the digests did not settle it
    package_changes: tuple[str, ...] = ()
    files_differ: list[str] = dataclasses.field(default_factory=list)

    @property
    def identical(self) -> bool:
        return self.digests[0] is not None and self.digests[0] == self.digests[1]

    @property
    def reproduced(self) -> bool:
        return self.identical or (self.inventories is not None and not self.package_changes and not self.files_differ)

    def format(self) -> str:
        lines = [f"current: {self.current}", f"rebuilt: {self.rebuilt}, --no-cache"]
        if self.identical:
            return "\n".join([*lines, f"identical: {self.digests[0]}", "reproduced"])
        if self.digests[0] and self.digests[1]:
            lines.append(f"digests differ: {self.digests[0]} (current), {self.digests[1]} (rebuilt)")
        a, b = self.inventories
        lines += [
            f"python distributions: {len(a.python or {})} in the current image, {len(b.python or {})} rebuilt",
            f"dpkg packages: {len(a.dpkg or {})} in the current image, {len(b.dpkg or {})} rebuilt",
        ]
        lines += [f"  {change}" for change in self.package_changes]
        total = len(set(a.files or {}) | set(b.files or {}))
        lines.append(f"files: {len(self.files_differ)} of {total} differ in content")
        lines += [f"  {path}" for path in self.files_differ[:FILES_SHOWN]]
        if len(self.files_differ) > FILES_SHOWN:
            lines.append(f"  ... and {len(self.files_differ) - FILES_SHOWN} more")
        if self.reproduced:
            lines.append("reproduced")
        else:
            why = [f"{len(self.package_changes)} package differences"] if self.package_changes else []
            why += [f"{len(self.files_differ)} files differ in content"] if self.files_differ else []
            lines.append(f"not reproduced: {', '.join(why)}")
        return "\n".join(lines)


def judge(current: Inventory, rebuilt: Inventory, digests: tuple[str | None, str | None] = (None, None)) -> Verdict:
    changes = (
        tuple(f"python {c}" for c in dict_changes(current.python or {}, rebuilt.python or {}))
        + tuple(f"python {c}" for c in record_changes(current, rebuilt))
        + tuple(f"dpkg {c}" for c in dict_changes(current.dpkg or {}, rebuilt.dpkg or {}))
    )
    return Verdict(
        f"{current.source} ({current.image_id})",
        f"{rebuilt.source} ({rebuilt.image_id})",
        digests,
        (current, rebuilt),
        changes,
        file_changes(current, rebuilt),
    )


def verify(root, target, options, builder: str | None = None) -> Verdict:
    """Rebuild ``target`` with ``builder``, by default the one that made its current image, and compare."""
    from envkit.image import buildah
    from envkit.image.build import LATEST, engine_or_none, find_image, repository

    repo = repository(target.name)
    if builder is None:
        # The builder that made the Docker engine's latest image; buildah labels what it builds.
        client = engine_or_none()
        image = find_image(client, f"{repo}:{LATEST}") if client is not None else None
        if image is not None:
            builder = "buildah" if buildah.VERSION_LABEL in (image.labels or {}) else "docker"
        elif buildah.available() and buildah.find(f"{repo}:{LATEST}") is not None:
            builder = "buildah"
        else:
            builder = "docker"  # its one line says how to build the target, or how to start an engine
    options = dataclasses.replace(options, builder=builder)
    return _verify_buildah(root, target, options) if builder == "buildah" else _verify_docker(root, target, options)


def _same_inputs(content_tag: str, rebuilt_tag: str) -> None:
    if rebuilt_tag != content_tag:
        raise EnvkitError(
            f"{content_tag} was built from other inputs than these (they give {rebuilt_tag}): "
            "pass the same --builder, --base-image, --wheelhouse, --ca-cert and --build-arg as its build"
        )


def _verify_docker(root, target, options) -> Verdict:
    from envkit.image.build import rebuild_as, repository, resolve_image
    from envkit.support.docker_client import connect_docker

    client = connect_docker()
    current, content_tag = resolve_image(client, target.name)
    scratch = f"{repository(target.name)}:{SCRATCH_TAG}"
    rebuilt_tag, rebuilt_id = rebuild_as(root, target, options, scratch)
    try:
        _same_inputs(content_tag, rebuilt_tag)
        return judge(
            *side_by_side(
                lambda: from_engine_image(connect_docker(), current.id),
                lambda: from_engine_image(connect_docker(), rebuilt_id),
            )
        )
    finally:
        client.images.remove(scratch, noprune=False)


def _verify_buildah(root, target, options) -> Verdict:
    """buildah keeps manifest digests: equal ones end the comparison; otherwise both images are
    read as `docker save` archives, with no engine needed."""
    from envkit.image import buildah
    from envkit.image.build import LATEST, rebuild_as, repository

    repo = repository(target.name)
    current = buildah.find(f"{repo}:{LATEST}")
    if current is None:
        raise EnvkitError(
            f"no image {repo}:{LATEST} in buildah's storage: build it first with "
            f"'envkit build {target.name} --builder buildah'"
        )
    content_tags = sorted(
        name.rpartition("/")[2]
        for name in current.names
        if name.rpartition("/")[2].startswith(f"{repo}:") and not name.endswith((f":{LATEST}", f":{SCRATCH_TAG}"))
    )
    if not content_tags:
        raise EnvkitError(
            f"image {repo}:{LATEST} has lost its content tag: rebuild it with "
            f"'envkit build {target.name} --builder buildah'"
        )
    scratch = f"{repo}:{SCRATCH_TAG}"
    rebuilt_tag, rebuilt_id = rebuild_as(root, target, options, scratch)
    try:
        _same_inputs(content_tags[0], rebuilt_tag)
        rebuilt = buildah.find(rebuilt_id)
        if current.digest == rebuilt.digest:
            return Verdict(
                f"{content_tags[0]} ({current.image_id})",
                f"{scratch} ({rebuilt.image_id})",
                (current.digest, rebuilt.digest),
            )
        with tempfile.TemporaryDirectory(prefix="envkit-verify-") as scratch_dir:

            def read(name: str, image, archive: Path) -> Inventory:
                buildah.push(image.image_id, f"docker-archive:{archive}")
                return dataclasses.replace(from_saved_tarball(archive), source=name)

            inventories = side_by_side(
                lambda: read(content_tags[0], current, Path(scratch_dir) / "current.tar"),
                lambda: read(scratch, rebuilt, Path(scratch_dir) / "rebuilt.tar"),
            )
        return judge(*inventories, digests=(current.digest, rebuilt.digest))
    finally:
        buildah.untag(scratch)

"""buildah, the daemonless builder: the same staged context and build args as the Docker
engine's build, and identical image digests on rebuild.

`buildah bud --timestamp SOURCE_DATE_EPOCH` stamps every file, layer and history entry
with the commit time, so two builds of one context give one image ID and one manifest
digest, RUN layers included (Debian 12's buildah 1.28; docs/design.md §3). buildah keeps
its images in containers-storage (shared with podman); envkit moves them into a Docker
engine with `buildah push IMAGE docker-daemon:NAME` (the image ID stays the same: it is
the config's digest) and to registries with `buildah push IMAGE docker://REF`.

This module only runs buildah; envkit.image.build decides what to build and where it goes.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.image.build_context import INDEX_SECRET, INDEX_SECRET_ENV
from envkit.support.bounded_load import load_text, parse_json

# The manifest format, explicit so that BUILDAH_FORMAT in the caller's environment cannot change the digest.
FORMAT = "oci"
# buildah adds this label to every image it builds; envkit reads it to tell which builder made an image.
VERSION_LABEL = "io.buildah.version"


@dataclass(frozen=True)
class StoredImage:
    """An image in buildah's storage."""

    image_id: str  # sha256:<config digest>; the Docker engine gives a pushed copy the same ID
    digest: str  # sha256:<manifest digest>
    size_bytes: int  # the uncompressed layers' sizes, as the manifest lists them
    names: tuple[str, ...]  # as buildah lists them: localhost/envkit-cpu:latest, ...


def cli() -> list[str]:
    """$BUILDAH (may be several words), else buildah on PATH; one line when there is none."""
    configured = shlex.split(os.environ.get("BUILDAH", ""))
    found = shutil.which(configured[0] if configured else "buildah")
    if not found:
        name = f"BUILDAH={os.environ['BUILDAH']}" if configured else "buildah"
        raise EnvkitError(
            f"--builder buildah needs buildah, and {name} is not an executable here: "
            "apt-get install buildah (or set BUILDAH=/path/to/buildah), or use --builder docker"
        )
    return [found, *configured[1:]]


def available() -> bool:
    try:
        cli()
    except EnvkitError:
        return False
    return True


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([*cli(), *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise EnvkitError(f"buildah {args[0]} failed: {last}", exit_code=1)
    return done


def version() -> str | None:
    """buildah's version ("1.28.2"), or None without buildah."""
    if not available():
        return None
    words = _run("--version", check=False).stdout.split()
    return words[2] if len(words) > 2 and words[:2] == ["buildah", "version"] else None


def has_timestamp() -> bool:
    """Whether this buildah's bud takes --timestamp, which identical digests need."""
    return available() and "--timestamp" in _run("bud", "--help", check=False).stdout


def find(reference: str) -> StoredImage | None:
    """The image ``reference`` (a name or an ID) in buildah's storage, or None."""
    listed = _run("images", "--json", "--no-trunc", reference, check=False)
    if listed.returncode != 0:
        return None
    [image] = parse_json(listed.stdout)
    manifest = parse_json(parse_json(_run("inspect", "--type", "image", image["id"]).stdout)["Manifest"])
    return StoredImage(
        image_id=image["id"],
        digest=image["digest"],
        names=tuple(image.get("names") or ()),
        size_bytes=sum(layer.get("size", 0) for layer in manifest.get("layers", [])),
    )


def bud_command(
    context: Path,
    args: Mapping[str, str],
    tags: tuple[str, ...],
    no_cache: bool,
    platform: str | None = None,
    secret: bool = False,
) -> list[str]:
    """`buildah bud` for a staged context: every step a cached layer (--layers), as BuildKit caches them;
    ``platform`` for another architecture than the host's; ``secret``: the index secret is in the environment
    (build_context.INDEX_SECRET_ENV), passed by its name."""
    command = [*cli(), "bud", "--format", FORMAT, "--layers", *(["--platform", platform] if platform else [])]
    if no_cache:
        command.append("--no-cache")
    if args.get("SOURCE_DATE_EPOCH"):
        command += ["--timestamp", args["SOURCE_DATE_EPOCH"]]
    for tag in tags:
        command += ["-t", tag]
    for key, value in sorted(args.items()):
        command += ["--build-arg", f"{key}={value}"]
    if secret:
        command += ["--secret", f"id={INDEX_SECRET},src={INDEX_SECRET_ENV},type=env"]
    command.append(str(context))
    return command


def pull_from_docker(reference: str, platform: str | None = None) -> None:
    """Copy the Docker engine's image ``reference`` into containers-storage (buildah's and
    podman's) under its name (buildah qualifies a short one): a build FROM it then starts from the engine's bytes and
    never asks a registry, and podman can run it. ``platform``: the image's, where it is not the host's."""
    _run("pull", "--quiet", *(["--platform", platform] if platform else []), f"docker-daemon:{reference}")


@dataclass(frozen=True)
class EngineImage:
    """One platform's image of a manifest list, as the Docker engine holds it."""

    platform: str  # linux/arm64
    image_id: str  # sha256:<config digest>: buildah's ID for it too
    reference: str  # a name of it in the engine


def push_manifest_list(images: list[EngineImage], destinations: list[str], tls_verify: bool = True) -> str:
    """One manifest list of ``images`` pushed, with the images, to each of ``destinations`` (docker://HOST/NAME:TAG);
    returns the list's digest as the registry stored it, the same under every destination.

    buildah reads only its own storage: an image the engine alone holds is copied in for the push and goes again
    after, as does the list."""
    name = f"localhost/envkit-manifest-list-{os.getpid()}"
    copied = []
    _run("manifest", "create", name)
    try:
        for image in images:
            if find(image.image_id) is None:
                pull_from_docker(image.reference, image.platform)
                copied.append(image.image_id)
            _run("manifest", "add", name, image.image_id)
        digests = set()
        with tempfile.TemporaryDirectory(prefix="envkit-manifest-") as work:
            for index, destination in enumerate(destinations):
                digest_file = Path(work, f"digest-{index}")
                _run(
                    "manifest", "push", "--all", "--quiet", f"--tls-verify={str(tls_verify).lower()}",
                    "--digestfile", str(digest_file), name, destination,
                )  # fmt: skip
                digests.add(load_text(digest_file).strip())
    finally:
        _run("manifest", "rm", name, check=False)
        for image_id in copied:
            _run("rmi", image_id, check=False)
    if len(digests) != 1:
        raise EnvkitError(
            f"the manifest list's pushes gave different digests ({', '.join(sorted(digests))})", exit_code=1
        )
    return digests.pop()


def push(reference: str, destination: str) -> None:
    """`buildah push` to a containers-image destination (``docker-daemon:NAME:TAG``,
    ``docker://HOST/NAME:TAG``, ``docker-archive:PATH``, ...)."""
    _run("push", "--quiet", reference, destination)


def tag(reference: str, *names: str) -> None:
    _run("tag", reference, *names)


def untag(name: str) -> None:
    """Remove one name; the image goes only when it was its last name and no container uses it."""
    _run("rmi", name, check=False)

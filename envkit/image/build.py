"""Images in the engine: their names, building them, and pushing them to a registry (by digest: image/pushed.py).

A target's images are ``envkit-<target>:<content hash>`` plus ``latest`` for the newest.
Two builders take the same staged context and build args. The Docker engine's builds go
through the docker CLI (BuildKit); everything else goes through the Docker SDK. The
SDK's build endpoint speaks only the legacy builder, which cannot run the
`RUN --mount=type=cache|bind` lines the rendered Dockerfiles rely on for fast
rebuilds and wheelhouse installs, so `docker build` with DOCKER_BUILDKIT=1 is the one
place where a client binary is needed. buildah (envkit.image.buildah) builds into its
own storage with identical digests on rebuild; envkit then moves the image into the
Docker engine, where run.sh runs it by the same image ID.
"""

from __future__ import annotations

import os
import platform as host_platform
import re
import shlex
import shutil
import subprocess
import sys
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.image import buildah
from envkit.image.build_context import (
    INDEX_SECRET,
    INDEX_SECRET_ENV,
    TAG_HEX,
    BuildOptions,
    build_args_for,
    context_digest,
    git_revision,
    index_secret,
    source_date_epoch,
    stage_context,
    staging_area,
)
from envkit.image.names import check_registry
from envkit.image.pushed import Pushed
from envkit.support.bounded_load import load_text
from envkit.support.docker_client import connect_docker, docker_sdk
from envkit.support.install_log import hash_mismatch

LATEST = "latest"
# What engines (docker info's Architecture) and hosts (uname -m) call their architecture, as docker's platform.
NATIVE_PLATFORMS = {"x86_64": "linux/amd64", "amd64": "linux/amd64", "aarch64": "linux/arm64", "arm64": "linux/arm64"}
# How much of a failed build's log is kept to find the line that says why.
LOG_TAIL_LINES = 400


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    image_id: str
    size_bytes: int
    reused: bool  # True when an image with this content tag already existed
    builder: str = "docker"
    digest: str | None = None  # the manifest digest, where the builder keeps one (buildah)
    where: str = "the Docker engine"


def repository(target_name: str) -> str:
    return f"envkit-{target_name}"


def docker_cli() -> list[str]:
    """The client command for BuildKit builds: $DOCKER, else Debian's /usr/bin/docker.

    /usr/bin/docker is preferred over PATH because newer clients hand BuildKit to the
    buildx plugin, which Debian 12 does not package. $DOCKER may be several words
    ("sudo docker"), as run.sh allows.
    """
    configured = shlex.split(os.environ.get("DOCKER", ""))
    if configured:
        found = shutil.which(configured[0])
        if not found:
            raise EnvkitError(
                f"DOCKER={os.environ['DOCKER']} does not start with an executable: give the docker client's path"
            )
        return [found, *configured[1:]]
    if os.access("/usr/bin/docker", os.X_OK):
        return ["/usr/bin/docker"]
    found = shutil.which("docker")
    if not found:
        raise EnvkitError("no docker client found: apt-get install docker.io (or set DOCKER=/path/to/docker)")
    return [found]


def build_platform(target, requested: str | None, native: str) -> str | None:
    """The --platform a build passes: None for the engine's own (``native``, e.g. x86_64) where the target lists
    it; one line for a platform the target does not list, or a cuda image on arm64 (which would train on the CPU)."""
    engine = NATIVE_PLATFORMS.get(native, f"linux/{native}")
    wanted = requested or engine
    refuse_unlisted(target, wanted, requested is not None)
    return None if wanted == engine else wanted


def refuse_unlisted(target, wanted: str, requested: bool = True) -> None:
    """One line for a platform the target does not list; ``requested``: named by --platform, not the engine's own.

    A --platform is checked before the engine is asked anything, so the refusal needs no engine."""
    if wanted in target.platforms:
        return
    where = f"--platform {wanted}" if requested else f"this engine builds {wanted} images"
    if target.kind == "cuda" and wanted == "linux/arm64":
        raise EnvkitError(
            f"envkit build {target.name}: {where}, and PyPI's aarch64 torch {target.torch} is the CPU build, so the "
            f"image would train on the CPU: build it on an x86-64 engine (or --platform linux/amd64, emulated), or "
            f"lock PyTorch's aarch64 CUDA build of torch for a target of its own"
        )
    hint = "" if requested else f"; pass --platform {target.platforms[0]} to build it emulated"
    raise EnvkitError(
        f"envkit build {target.name}: {where}, and the target builds for {', '.join(target.platforms)} only "
        f"(envkit.yaml platforms){hint}"
    )


def _docker_build(
    context: Path,
    args: dict[str, str],
    tags: tuple[str, ...],
    no_cache: bool,
    platform: str | None = None,
    secret: str | None = None,
) -> None:
    """``secret``: the index URL with credentials (build_context.index_secret), passed as BuildKit's secret."""
    command = [*docker_cli(), "build", "--progress=plain", *(["--platform", platform] if platform else [])]
    for tag in tags:
        command += ["-t", tag]
    for key, value in sorted(args.items()):
        command += ["--build-arg", f"{key}={value}"]
    if secret is not None:
        command += ["--secret", f"id={INDEX_SECRET},env={INDEX_SECRET_ENV}"]
    if no_cache:
        command.append("--no-cache")
    command.append(str(context))
    _stream_build(command, {**os.environ, "DOCKER_BUILDKIT": "1", **secret_env(secret)}, f"docker build of {tags[0]}")


def secret_env(secret: str | None) -> dict[str, str]:
    """The builder's environment that carries the index secret, if any."""
    return {INDEX_SECRET_ENV: secret} if secret is not None else {}


def _stream_build(command: list[str], env: Mapping[str, str], what: str) -> None:
    """Run a builder; its log is the user's progress display.

    Each line goes on to stderr as it comes, and the last ones are kept to say why a
    build failed.
    """
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    with subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as process:
        for line in process.stdout:
            sys.stderr.write(line)
            tail.append(line.rstrip("\n"))
    if process.returncode != 0:
        mismatch = hash_mismatch(list(tail))
        if mismatch:
            raise EnvkitError(f"{what} failed: {mismatch}")
        raise EnvkitError(f"{what} failed (exit {process.returncode}); the build log is above", exit_code=1)


def build(root: Path, target, options: BuildOptions) -> BuiltImage:
    if options.platform:
        refuse_unlisted(target, options.platform)
    if options.builder == "buildah":
        return _build_with_buildah(root, target, options)
    client = connect_docker()
    platform = build_platform(target, options.platform, client.info().get("Architecture", ""))
    repo = repository(target.name)
    with staging_area(root, target.name) as context:
        stage_context(root, target, options, context)
        args = build_args_for(options, git_revision(root), source_date_epoch(root, target.name, options.output))
        tag = f"{repo}:{context_digest(context, args, options.builder, platform)[:TAG_HEX]}"
        existing = find_image(client, tag)
        if existing is not None and not options.no_cache:
            existing.tag(repo, LATEST)
            return BuiltImage(tag=tag, image_id=existing.id, size_bytes=existing.attrs["Size"], reused=True)
        secret = index_secret(options.build_args)
        _docker_build(context, args, (tag, f"{repo}:{LATEST}"), options.no_cache, platform, secret)
    image = client.images.get(tag)
    return BuiltImage(tag=tag, image_id=image.id, size_bytes=image.attrs["Size"], reused=False)


def _build_with_buildah(root: Path, target, options: BuildOptions) -> BuiltImage:
    """Build into buildah's storage (cached per step), then move the image into the Docker engine.

    Without an engine the image stays in buildah's storage, where podman finds it too.
    """
    buildah.cli()  # no buildah: one line before anything is staged
    platform = build_platform(target, options.platform, host_platform.machine())
    repo = repository(target.name)
    client = engine_or_none()
    with staging_area(root, target.name) as context:
        stage_context(root, target, options, context)
        args = build_args_for(options, git_revision(root), source_date_epoch(root, target.name, options.output))
        tag = f"{repo}:{context_digest(context, args, options.builder, platform)[:TAG_HEX]}"
        stored = None if options.no_cache else buildah.find(tag)
        reused = stored is not None
        if stored is None:
            _base_into_buildah(base_image(context, args), client)
            secret = index_secret(options.build_args)
            tags = (tag, f"{repo}:{LATEST}")
            command = buildah.bud_command(context, args, tags, options.no_cache, platform, secret is not None)
            _stream_build(command, {**os.environ, **secret_env(secret)}, f"buildah bud of {tag}")
            stored = buildah.find(tag)
        else:
            buildah.tag(tag, f"{repo}:{LATEST}")
    where = "buildah's storage"
    if client is None:
        where += " only (no Docker engine to move it into)"
    else:
        into_engine(client, tag, stored.image_id)
        where += " and the Docker engine"
    return BuiltImage(
        tag=tag,
        image_id=stored.image_id,
        size_bytes=stored.size_bytes,
        reused=reused,
        builder="buildah",
        digest=stored.digest,
        where=where,
    )


def engine_or_none():
    """The Docker engine, or None where none answers (buildah works without one)."""
    try:
        return connect_docker()
    except EnvkitError:
        return None


def base_image(context: Path, args: Mapping[str, str]) -> str:
    """The base a staged build starts FROM: the --base-image override, else the Dockerfile's default."""
    if args.get("BASE_IMAGE"):
        return args["BASE_IMAGE"]
    dockerfile = load_text(context / "Dockerfile")
    match = re.search(r"^ARG BASE_IMAGE=(\S+)$", dockerfile, flags=re.MULTILINE)
    if not match:
        raise EnvkitError(f"{context / 'Dockerfile'} declares no ARG BASE_IMAGE default: run 'envkit render' again")
    return match.group(1)


def _base_into_buildah(reference: str, client) -> None:
    """A base that only the Docker engine holds (a `docker import`ed one, say) is copied into
    buildah's storage, so both builders start from the same bytes and no registry is asked.
    A base neither has is pulled by buildah as Docker would pull it."""
    if buildah.find(reference) is not None or client is None or find_image(client, reference) is None:
        return
    buildah.pull_from_docker(reference)


def into_engine(client, tag: str, image_id: str) -> None:
    """Put buildah's image ``tag`` into the Docker engine under ``tag`` and the target's
    ``latest``. The engine's image ID is buildah's: both are the digest of the config."""
    existing = find_image(client, tag)
    if existing is None or existing.id != image_id:
        buildah.push(tag, f"docker-daemon:{tag}")
        existing = client.images.get(tag)
    repo, _, _ = tag.rpartition(":")
    existing.tag(repo, LATEST)


def rebuild_as(root: Path, target, options: BuildOptions, scratch_tag: str) -> tuple[str, str]:
    """Build the target from scratch (no cache) under ``scratch_tag`` only, leaving its tags alone.

    Returns the content tag these inputs give, so the caller can tell whether the
    rebuild used the same inputs as the image it is compared with, and the rebuilt
    image's ID (buildah's builds stay in buildah's storage).
    """
    with staging_area(root, target.name) as context:
        stage_context(root, target, options, context)
        args = build_args_for(options, git_revision(root), source_date_epoch(root, target.name, options.output))
        content_tag = f"{repository(target.name)}:{context_digest(context, args, options.builder)[:TAG_HEX]}"
        secret = index_secret(options.build_args)
        if options.builder == "buildah":
            _base_into_buildah(base_image(context, args), engine_or_none())
            command = buildah.bud_command(context, args, (scratch_tag,), True, secret=secret is not None)
            _stream_build(command, {**os.environ, **secret_env(secret)}, f"buildah bud of {scratch_tag}")
            return content_tag, buildah.find(scratch_tag).image_id
        _docker_build(context, args, (scratch_tag,), no_cache=True, secret=secret)
    return content_tag, connect_docker().images.get(scratch_tag).id


def find_image(client, reference: str):
    """The engine's image for ``reference`` (a name or an id), or None."""
    try:
        return client.images.get(reference)
    except docker_sdk().errors.ImageNotFound:
        return None


def resolve_image(client, target_name: str, tag: str | None = None):
    """The image for a target (``latest`` unless ``tag``) and its content tag."""
    repo = repository(target_name)
    reference = f"{repo}:{tag or LATEST}"
    image = find_image(client, reference)
    if image is None:
        raise EnvkitError(f"no image {reference} in the engine: build it first with 'envkit build {target_name}'")
    content_tags = sorted(t for t in image.tags if t.startswith(f"{repo}:") and t != f"{repo}:{LATEST}")
    if not content_tags:
        raise EnvkitError(f"image {reference} has lost its content tag: rebuild it with 'envkit build {target_name}'")
    if tag and f"{repo}:{tag}" in content_tags:
        return image, f"{repo}:{tag}"
    return image, content_tags[0]


def push(target, registry: str, tag: str | None = None, progress=None) -> list[Pushed]:
    """Push the image under its content tag and latest; each with the manifest digest the registry answered.

    A target of several platforms whose engine holds an image of the same inputs for more than one of them (the
    others built with --platform) goes as one manifest list, so each architecture pulls its own by one digest."""
    check_registry(registry)
    client = connect_docker()
    image, content_tag = resolve_image(client, target.name, tag)
    remote = f"{registry}/{repository(target.name)}"
    tags = (content_tag.rpartition(":")[2], LATEST)
    if len(target.platforms) > 1:
        images = platform_images(client, target, image)
        missing = [platform for platform in target.platforms if platform not in images]
        if missing:
            print(
                f"envkit: warning: envkit push {target.name}: the engine holds no {', '.join(missing)} image of "
                f"these inputs, so the registry gets {', '.join(images)} only; `envkit build {target.name} "
                f"--platform {missing[0]}` builds it (emulated)",
                file=sys.stderr,
            )
        if len(images) > 1:
            return _push_list(remote, tags, images, image, registry, progress)
    pushed = []
    docker = docker_sdk()
    for remote_tag in tags:
        digest = None
        try:
            image.tag(remote, remote_tag)
            for line in client.images.push(remote, tag=remote_tag, stream=True, decode=True):
                if "error" in line:
                    raise EnvkitError(f"push of {remote}:{remote_tag} failed: {line['error']}", exit_code=1)
                # The engine's last word on a push: {"aux": {"Tag": ..., "Digest": "sha256:...", "Size": ...}}.
                digest = (line.get("aux") or {}).get("Digest") or digest
                if progress and line.get("status") and not line.get("progressDetail"):
                    progress(line["status"])
        except docker.errors.APIError as exc:
            raise EnvkitError(f"push of {remote}:{remote_tag} failed: {exc.explanation or exc}", exit_code=1) from None
        if not digest:
            raise EnvkitError(
                f"push of {remote}:{remote_tag} ended without the registry's digest: push again", exit_code=1
            )
        pushed.append(Pushed(remote, remote_tag, digest, image.id))
    return pushed


def image_platform(image) -> str:
    """An engine image's platform in docker's form: linux/arm64."""
    return f"{image.attrs.get('Os', 'linux')}/{image.attrs.get('Architecture', '')}"


def platform_images(client, target, image) -> dict:
    """Platform -> the engine's image of it built from the same inputs as ``image`` (every label equal: the
    revision, the config, the lock, the base), for each platform the target lists: ``image`` for its own, else
    the newest such image."""
    candidates = sorted(
        client.images.list(name=repository(target.name)), key=lambda other: other.attrs.get("Created", ""), reverse=True
    )
    found = {}
    for candidate in (image, *candidates):
        platform = image_platform(candidate)
        if platform in target.platforms and platform not in found and candidate.labels == image.labels:
            found[platform] = candidate
    return {platform: found[platform] for platform in target.platforms if platform in found}


def _push_list(remote: str, tags: tuple[str, ...], images: dict, image, registry: str, progress) -> list[Pushed]:
    """``images`` (platform -> engine image) as one manifest list under each of ``tags`` (buildah manifest
    create/add/push); the record keeps the list's digest, ``image``'s ID and each platform's."""
    if not buildah.available():
        raise EnvkitError(
            f"pushing {', '.join(images)} as one manifest list needs buildah: apt-get install buildah (or set "
            f"BUILDAH=/path/to/buildah), or remove the other platforms' images to push {image_platform(image)} alone"
        )
    members = [
        buildah.EngineImage(platform, each.id, next((t for t in each.tags if not t.endswith(f":{LATEST}")), each.id))
        for platform, each in images.items()
    ]
    if progress:
        progress(f"pushing one manifest list of {', '.join(images)} to {remote} ({', '.join(tags)})")
    # Like the Docker engine, plain http for a registry on this machine only.
    host = registry.split("/", 1)[0].rsplit(":", 1)[0]
    local = host in ("localhost", "[::1]") or host.startswith("127.")
    digest = buildah.push_manifest_list(members, [f"docker://{remote}:{t}" for t in tags], tls_verify=not local)
    platforms = tuple((platform, each.id) for platform, each in images.items())
    return [Pushed(remote, remote_tag, digest, image.id, platforms) for remote_tag in tags]

"""Images: stage a build context, name it by its hash, build it, save/load it, push it.

Builds go through the docker CLI (BuildKit); everything else goes through the Docker
SDK. The SDK's build endpoint speaks only the legacy builder, which cannot run the
`RUN --mount=type=cache|bind` lines the rendered Dockerfiles rely on for fast
rebuilds and wheelhouse installs, so `docker build` with DOCKER_BUILDKIT=1 is the one
place where a client binary is needed.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from envkit import __version__
from envkit.doctor import connect_engine
from envkit.errors import EnvkitError

TAG_HEX = 12
LATEST = "latest"
MANIFEST_VERSION = 1
# Build args that say where the image came from rather than what is in it: they do
# not enter the tag, so the same inputs at two git revisions share one tag.
PROVENANCE_ARGS = frozenset({"ENVKIT_REVISION"})
# The rendered Dockerfile labels each pinned version as io.envkit.pin.<package>.
PIN_LABEL = "io.envkit.pin."
_CHUNK = 1 << 20
_BUILD_ARG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_REGISTRY = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")


@dataclass(frozen=True)
class BuildOptions:
    no_cache: bool = False
    base_image: str | None = None
    wheelhouse: Path | None = None
    ca_certs: tuple[Path, ...] = ()
    build_args: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    image_id: str
    size_bytes: int
    reused: bool  # True when an image with this content tag already existed


def repository(target_name: str) -> str:
    return f"envkit-{target_name}"


def parse_build_arg(text: str) -> tuple[str, str]:
    if not _BUILD_ARG.match(text):
        raise EnvkitError(f"--build-arg '{text}' is not KEY=VALUE (KEY: letters, digits, underscores)")
    key, value = text.split("=", 1)
    return key, value


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
            raise EnvkitError(f"DOCKER={os.environ['DOCKER']} does not start with an executable: give the docker client's path")
        return [found, *configured[1:]]
    if os.access("/usr/bin/docker", os.X_OK):
        return ["/usr/bin/docker"]
    found = shutil.which("docker")
    if not found:
        raise EnvkitError("no docker client found: apt-get install docker.io (or set DOCKER=/path/to/docker)")
    return [found]


# ---------------------------------------------------------------- build context


def stage_context(root: Path, target, options: BuildOptions, dest: Path) -> None:
    """Lay out the build context of docs/design.md §3 under ``dest``."""
    rendered = root / "docker" / target.name
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Dockerfile", ".dockerignore"):
        source = rendered / name
        if not source.is_file():
            raise EnvkitError(f"{source} is missing: run 'envkit render' (or 'make render') first")
        shutil.copyfile(source, dest / name)
    recipes = root / "recipes"
    if not recipes.is_dir():
        raise EnvkitError(f"{recipes} is missing: the images need the recipes directory")
    shutil.copytree(recipes, dest / "recipes", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _stage_certificates([*target.ca_certificates, *options.ca_certs], dest / "certs")
    _stage_wheels(options.wheelhouse, dest / "wheels")


def _stage_certificates(certificates: Iterable[Path], dest: Path) -> None:
    dest.mkdir()
    for cert in certificates:
        cert = Path(cert)
        if not cert.is_file():
            raise EnvkitError(f"CA certificate {cert} does not exist: give a PEM file")
        data = cert.read_bytes()
        if b"-----BEGIN CERTIFICATE-----" not in data:
            raise EnvkitError(f"CA certificate {cert} is not PEM: give a file with '-----BEGIN CERTIFICATE-----' blocks")
        # update-ca-certificates only picks up *.crt files.
        staged = dest / f"{cert.stem}.crt"
        if staged.exists() and staged.read_bytes() != data:
            raise EnvkitError(f"two different CA certificates are named {cert.stem}: rename one of them")
        staged.write_bytes(data)


def _stage_wheels(wheelhouse: Path | None, dest: Path) -> None:
    dest.mkdir()
    if wheelhouse is None:
        return
    if not wheelhouse.is_dir():
        raise EnvkitError(f"--wheelhouse {wheelhouse} is not a directory: give a directory of *.whl files")
    wheels = sorted(wheelhouse.glob("*.whl"))
    if not wheels:
        raise EnvkitError(f"--wheelhouse {wheelhouse} holds no *.whl files: fill it with 'pip download -d {wheelhouse} ...'")
    for wheel in wheels:
        try:
            os.link(wheel, dest / wheel.name)  # wheels are large; a hard link costs nothing
        except OSError:
            shutil.copy2(wheel, dest / wheel.name)


def _hash_file(path: Path, hasher):
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(_CHUNK), b""):
            hasher.update(chunk)
    return hasher


def context_digest(context: Path, build_args: Mapping[str, str]) -> str:
    """sha256 over the staged files (each as path + NUL + bytes) and the content build args."""
    total = hashlib.sha256()
    files = sorted((p for p in context.rglob("*") if p.is_file()), key=lambda p: p.relative_to(context).as_posix())
    for path in files:
        entry = hashlib.sha256(path.relative_to(context).as_posix().encode() + b"\0")
        total.update(_hash_file(path, entry).digest())
    content_args = {k: v for k, v in build_args.items() if k not in PROVENANCE_ARGS}
    total.update(json.dumps(content_args, sort_keys=True).encode())
    return total.hexdigest()


def build_args_for(options: BuildOptions, revision: str | None) -> dict[str, str]:
    """Only overrides: every arg has its default from the config in the Dockerfile."""
    args: dict[str, str] = {}
    if options.base_image:
        args["BASE_IMAGE"] = options.base_image
    if options.wheelhouse is not None:
        args["PIP_NO_INDEX"] = "1"
    if revision:
        args["ENVKIT_REVISION"] = revision
    args.update(options.build_args)
    return args


def git_revision(root: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, check=False,
        )
    except OSError:
        return None
    return done.stdout.strip() or None


# ---------------------------------------------------------------- build


def cache_dir() -> Path:
    """Same place scripts/base-image.sh caches the base image."""
    configured = os.environ.get("ENVKIT_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envkit"


def staging_path(root: Path, target_name: str) -> Path:
    return cache_dir() / "contexts" / f"{target_name}-{hashlib.sha256(str(root).encode()).hexdigest()[:TAG_HEX]}"


@contextmanager
def staging_area(root: Path, target_name: str):
    """A fixed staging directory per project and target, held under an exclusive lock.

    Fixed rather than temporary because the docker client names its BuildKit context
    session after the directory: the same path lets BuildKit send only changed files
    instead of the whole wheelhouse on every build. Hard-linked wheels and copied
    recipes keep their mtimes, so unchanged files are recognised as such.
    """
    context = staging_path(root, target_name)
    context.parent.mkdir(parents=True, exist_ok=True)
    with open(context.parent / f".{context.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two builds of one target must not stage into each other
        shutil.rmtree(context, ignore_errors=True)
        yield context


def _docker_build(context: Path, args: Mapping[str, str], tags: Iterable[str], no_cache: bool) -> None:
    command = [*docker_cli(), "build", "--progress=plain"]
    for tag in tags:
        command += ["-t", tag]
    for key, value in sorted(args.items()):
        command += ["--build-arg", f"{key}={value}"]
    if no_cache:
        command.append("--no-cache")
    command.append(str(context))
    # The build log is the user's progress display: it goes straight to stderr.
    done = subprocess.run(command, env={**os.environ, "DOCKER_BUILDKIT": "1"}, stdout=sys.stderr, check=False)
    if done.returncode != 0:
        raise EnvkitError(f"docker build of {', '.join(tags)} failed (exit {done.returncode}); the build log is above", exit_code=1)


def build(root: Path, target, options: BuildOptions) -> BuiltImage:
    client = connect_engine()
    repo = repository(target.name)
    with staging_area(root, target.name) as context:
        stage_context(root, target, options, context)
        args = build_args_for(options, git_revision(root))
        tag = f"{repo}:{context_digest(context, args)[:TAG_HEX]}"
        existing = _find_image(client, tag)
        if existing is not None and not options.no_cache:
            existing.tag(repo, LATEST)
            return BuiltImage(tag=tag, image_id=existing.id, size_bytes=existing.attrs["Size"], reused=True)
        _docker_build(context, args, (tag, f"{repo}:{LATEST}"), options.no_cache)
    image = client.images.get(tag)
    return BuiltImage(tag=tag, image_id=image.id, size_bytes=image.attrs["Size"], reused=False)


def rebuild_as(root: Path, target, options: BuildOptions, scratch_tag: str) -> tuple[str, object]:
    """Build the target from scratch (no cache) under ``scratch_tag`` only, leaving its tags alone.

    Returns the content tag these inputs give, so the caller can tell whether the
    rebuild used the same inputs as the image it is compared with.
    """
    client = connect_engine()
    with staging_area(root, target.name) as context:
        stage_context(root, target, options, context)
        args = build_args_for(options, git_revision(root))
        content_tag = f"{repository(target.name)}:{context_digest(context, args)[:TAG_HEX]}"
        _docker_build(context, args, (scratch_tag,), no_cache=True)
    return content_tag, client.images.get(scratch_tag)


def _find_image(client, reference: str):
    import docker

    try:
        return client.images.get(reference)
    except docker.errors.ImageNotFound:
        return None


def resolve_image(client, target_name: str, tag: str | None = None):
    """The image for a target (``latest`` unless ``tag``) and its content tag."""
    repo = repository(target_name)
    reference = f"{repo}:{tag or LATEST}"
    image = _find_image(client, reference)
    if image is None:
        raise EnvkitError(f"no image {reference} in the engine: build it first with 'envkit build {target_name}'")
    content_tags = sorted(t for t in image.tags if t.startswith(f"{repo}:") and t != f"{repo}:{LATEST}")
    if not content_tags:
        raise EnvkitError(f"image {reference} has lost its content tag: rebuild it with 'envkit build {target_name}'")
    if tag and f"{repo}:{tag}" in content_tags:
        return image, f"{repo}:{tag}"
    return image, content_tags[0]


# ---------------------------------------------------------------- save / load


def _atomic_write(path: Path, write) -> None:
    """``write(stream)`` into a temp file beside ``path``, then rename: never a half file."""
    try:
        fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    except OSError as exc:
        raise EnvkitError(f"cannot write into {path.parent}: {exc.strerror}; choose a writable --output-dir") from None
    try:
        # mkstemp makes 0600 files; a saved image is meant to be handed on, so honour the umask.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(partial, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as stream:
            write(stream)
        os.replace(partial, path)
    except OSError as exc:
        os.unlink(partial)
        raise EnvkitError(f"cannot write {path}: {exc.strerror} (nothing was left behind)", exit_code=1) from None
    except BaseException:
        os.unlink(partial)
        raise


class _HashingWriter:
    """File wrapper that hashes and counts what passes through it."""

    def __init__(self, stream):
        self.stream, self.sha256, self.size = stream, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self.stream.write(data)

    def flush(self) -> None:
        self.stream.flush()


def save(target, tag: str | None, output_dir: Path) -> tuple[Path, Path]:
    client = connect_engine()
    image, content_tag = resolve_image(client, target.name, tag)
    stem = f"{repository(target.name)}-{content_tag.split(':', 1)[1]}"
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvkitError(f"cannot create --output-dir {output_dir}: {exc.strerror}; choose a writable directory") from None
    tarball, manifest_path = output_dir / f"{stem}.tar.gz", output_dir / f"{stem}.manifest.json"
    digest: dict[str, object] = {}

    import docker

    def write_tarball(stream) -> None:
        hashed = _HashingWriter(stream)
        # mtime=0 and no file name in the gzip header: the same image gives the same bytes.
        # Level 1: measured on the 1.16 GB cpu image, 386 MB in 19 s against 343 MB in
        # 62 s at level 6; the time saved outweighs 12% more bytes to copy.
        with gzip.GzipFile(filename="", mode="wb", fileobj=hashed, mtime=0, compresslevel=1) as compressed:
            try:
                for chunk in image.save(named=content_tag):
                    compressed.write(chunk)
            except docker.errors.DockerException as exc:
                raise EnvkitError(f"the engine could not export {content_tag}: {exc}", exit_code=1) from None
        digest.update(sha256=hashed.sha256.hexdigest(), size=hashed.size)

    _atomic_write(tarball, write_tarball)
    labels = image.labels or {}
    # The image's own labels say what is in it; the config may have moved on since.
    pins = {k[len(PIN_LABEL):]: v for k, v in sorted(labels.items()) if k.startswith(PIN_LABEL)}
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "envkit_version": __version__,
        "target": target.name,
        "tag": content_tag,
        "image_id": image.id,
        "pins": pins or target.pins(),
        "labels": labels,
        "tarball": tarball.name,
        "sha256": digest["sha256"],
        "size": digest["size"],
    }
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    _atomic_write(manifest_path, lambda stream: stream.write(text.encode()))
    return tarball, manifest_path


_MANIFEST_FIELDS = {"manifest_version": int, "tag": str, "image_id": str, "tarball": str, "sha256": str, "size": int, "pins": dict}


def read_manifest(path: Path) -> dict:
    """Parse and shape-check a manifest; any flaw is one line naming the field."""
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise EnvkitError(f"manifest {path} is missing: 'envkit load' needs the .manifest.json written by 'envkit save'") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EnvkitError(f"manifest {path} is not readable JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise EnvkitError(f"manifest {path} is not a JSON object")
    for name, kind in _MANIFEST_FIELDS.items():
        if not isinstance(manifest.get(name), kind):
            raise EnvkitError(f"manifest {path} has no valid '{name}' ({kind.__name__} expected)")
    if manifest["manifest_version"] > MANIFEST_VERSION:
        raise EnvkitError(f"manifest {path} is version {manifest['manifest_version']}; this envkit reads up to {MANIFEST_VERSION}: upgrade envkit")
    # Only envkit's own names: a manifest must not retag an image as, say, ubuntu:latest.
    if not re.fullmatch(rf"envkit-[a-z0-9][a-z0-9._-]*:[0-9a-f]{{{TAG_HEX}}}", manifest["tag"]):
        raise EnvkitError(f"manifest {path} has tag '{manifest['tag']}': envkit-<target>:<{TAG_HEX} hex> expected")
    if not re.fullmatch(r"[0-9a-f]{64}", manifest["sha256"]):
        raise EnvkitError(f"manifest {path} has a malformed sha256 (64 lowercase hex expected)")
    if Path(manifest["tarball"]).name != manifest["tarball"]:
        raise EnvkitError(f"manifest {path} names tarball '{manifest['tarball']}': a bare file name is expected")
    return manifest


def manifest_for(path: Path) -> Path:
    """Accept either file of the pair: the tarball or its manifest."""
    name = path.name
    if name.endswith(".manifest.json"):
        return path
    if name.endswith(".tar.gz"):
        return path.with_name(name[: -len(".tar.gz")] + ".manifest.json")
    raise EnvkitError(f"{path} is neither an image tarball (*.tar.gz) nor a manifest (*.manifest.json)")


def verify_tarball(manifest_path: Path, manifest: dict) -> Path:
    tarball = manifest_path.with_name(manifest["tarball"])
    if not tarball.is_file():
        raise EnvkitError(f"tarball {tarball} named by {manifest_path.name} is missing")
    sha256 = _hash_file(tarball, hashlib.sha256()).hexdigest()
    if sha256 != manifest["sha256"]:
        raise EnvkitError(
            f"refusing to load {tarball.name}: its sha256 {sha256[:16]}... does not match "
            f"the manifest's {manifest['sha256'][:16]}... (corrupt or altered: fetch it again)"
        )
    return tarball


def load(path: Path) -> str:
    manifest_path = manifest_for(path)
    manifest = read_manifest(manifest_path)
    tarball = verify_tarball(manifest_path, manifest)
    client = connect_engine()
    import docker

    with tarball.open("rb") as stream:  # the engine unpacks gzip itself
        try:
            client.images.load(stream)
        except docker.errors.DockerException as exc:
            raise EnvkitError(f"the engine refused {tarball.name}: {exc}", exit_code=1) from None
    image = _find_image(client, manifest["image_id"])
    if image is None:
        raise EnvkitError(f"{tarball.name} loaded, but image {manifest['image_id']} from its manifest is not in the engine", exit_code=1)
    repo, _, content_tag = manifest["tag"].rpartition(":")
    image.tag(repo, content_tag)
    image.tag(repo, LATEST)
    return manifest["tag"]


# ---------------------------------------------------------------- push


def push(target, registry: str, tag: str | None = None, progress=None) -> list[str]:
    if not _REGISTRY.match(registry):
        raise EnvkitError(f"registry '{registry}' is not valid: give HOST[:PORT][/PATH] in lowercase, e.g. registry.example.com:5000/team")
    client = connect_engine()
    image, content_tag = resolve_image(client, target.name, tag)
    remote = f"{registry}/{repository(target.name)}"
    pushed = []
    import docker

    for remote_tag in (content_tag.rpartition(":")[2], LATEST):
        try:
            image.tag(remote, remote_tag)
            for line in client.images.push(remote, tag=remote_tag, stream=True, decode=True):
                if "error" in line:
                    raise EnvkitError(f"push of {remote}:{remote_tag} failed: {line['error']}", exit_code=1)
                if progress and line.get("status") and not line.get("progressDetail"):
                    progress(line["status"])
        except docker.errors.APIError as exc:
            raise EnvkitError(f"push of {remote}:{remote_tag} failed: {exc.explanation or exc}", exit_code=1) from None
        pushed.append(f"{remote}:{remote_tag}")
    return pushed

"""Build contexts: stage the files an image is built from, and name them by their hash.

The context of docs/design.md §4 (Dockerfile, .dockerignore, the target's lock, the project's
files, CA certificates, wheels) is laid out in a fixed staging directory; its sha256, with
the build args that change the image's content, becomes the image's content tag.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from envkit.errors import EnvkitError
from envkit.image import BUILDERS
from envkit.lock.base_digest import split_reference
from envkit.lock.lockfile import LOCK_FILE, read_lock
from envkit.project import secrets
from envkit.project.files import DEFAULT_LIMIT_MB, project_files
from envkit.project.output import DEFAULT_OUTPUT, Output
from envkit.support import provenance
from envkit.support.bounded_load import hash_file, load_bytes, load_text
from envkit.support.cache import beyond, cache_dir, private_folder

TAG_HEX = 12
# Build args that say where the image came from rather than what is in it: they do
# not enter the tag, so the same inputs at two git revisions share one tag.
# SOURCE_DATE_EPOCH only fixes timestamps (the commit's time), never content.
PROVENANCE_ARGS = frozenset({"ENVKIT_REVISION", "SOURCE_DATE_EPOCH"})
# What a locked Dockerfile records of its lock (templates/Dockerfile.j2).
LOCK_SHA_LINE = "ENV ENVKIT_LOCK_SHA256="
_BUILD_ARG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class BuildOptions:
    no_cache: bool = False
    base_image: str | None = None
    wheelhouse: Path | None = None
    ca_certs: tuple[Path, ...] = ()
    build_args: Mapping[str, str] = field(default_factory=dict)
    builder: str = BUILDERS[0]
    platform: str | None = None  # --platform: None builds for the engine's own
    files_limit_mb: int = DEFAULT_LIMIT_MB  # the config's files_limit_mb: the project's files together
    include_secrets: tuple[str, ...] = ()  # the config's include_secrets: what looks like a secret, carried
    output: Output = DEFAULT_OUTPUT  # the config's output: where the target's rendered files are


# An index URL with credentials reaches the pip steps as this build secret (templates/Dockerfile.j2 mounts it),
# which the builder reads from this variable of its own environment: never as an ARG, whose value `docker history`
# and the image's config keep, nor on the builder's command line, which any user of the machine can read.
INDEX_SECRET = "pip_index_url"
INDEX_SECRET_ENV = "ENVKIT_PIP_INDEX_URL"
INDEX_ARG = "PIP_INDEX_URL"


def index_secret(build_args: Mapping[str, str]) -> str | None:
    """The index URL with credentials that the build gets as the secret INDEX_SECRET while its ARG gets the URL
    without them: --build-arg PIP_INDEX_URL's value where it holds credentials (envkit.project.secrets), else
    INDEX_SECRET_ENV of envkit's own environment, which keeps it off every command line (`envkit experiment`
    prints the `envkit build` it runs). A build arg holding any other secret is one line."""
    for key, value in build_args.items():
        why = key != INDEX_ARG and credentials(value)
        if why:
            raise EnvkitError(
                f"--build-arg {key} {why}, which `docker history` and the image's config would keep: give a secret to "
                f"the program at run time (`envkit launch --env`, the environment), an index's as {INDEX_ARG}"
            )
    url = build_args.get(INDEX_ARG)
    return url if url and credentials(url) else os.environ.get(INDEX_SECRET_ENV) or None


def credentials(value: str) -> str | None:
    """What secret a build arg's ``value`` holds (a password in a URL, a token...), or None."""
    return secrets.by_content(value.encode("utf-8", "surrogateescape")) or secrets.in_url(value)


def _bare_url(url: str) -> str:
    """``url`` without its user, password and query: what an ARG may say of an index that index_secret reaches."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2], query=""))


def parse_build_arg(text: str) -> tuple[str, str]:
    if not _BUILD_ARG.match(text):
        raise EnvkitError(f"--build-arg '{text}' is not KEY=VALUE (KEY: letters, digits, underscores)")
    key, value = text.split("=", 1)
    return key, value


def stage_context(root: Path, target, options: BuildOptions, dest: Path) -> None:
    """Lay out the build context of docs/design.md §4 under ``dest``."""
    rendered = options.output.image_folder(root, target.name)
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Dockerfile", ".dockerignore", *provenance.shipped()):
        source = rendered / name
        if not source.is_file():
            raise EnvkitError(f"{source} is missing: run 'envkit render' (or 'make render') first")
        shutil.copyfile(source, dest / name)
    _stage_lock(rendered, dest)
    files = project_files(root, options.files_limit_mb, options.include_secrets, options.output)
    _stage_project(files, dest / "project")
    _stage_certificates([*target.ca_certificates, *options.ca_certs], dest / "certs")
    _stage_wheels(options.wheelhouse, dest / "wheels")


def _stage_lock(rendered: Path, dest: Path) -> None:
    """The lock beside the Dockerfile that was rendered from it, or none for an unlocked one."""
    lock = read_lock(rendered / LOCK_FILE)
    dockerfile = load_text(dest / "Dockerfile")
    recorded = next(
        (line[len(LOCK_SHA_LINE) :].strip() for line in dockerfile.splitlines() if line.startswith(LOCK_SHA_LINE)), None
    )
    found = lock.sha256 if lock else None
    if recorded != found:
        now = f"{LOCK_FILE} is sha256 {found}" if found else f"there is no {LOCK_FILE}"
        was = f"installs the lock of sha256 {recorded}" if recorded else "was rendered unlocked"
        raise EnvkitError(f"{rendered / 'Dockerfile'} {was}, but {now}: run 'envkit render --target {rendered.name}'")
    if lock is not None:
        shutil.copyfile(rendered / LOCK_FILE, dest / LOCK_FILE)


def _stage_project(files, dest: Path) -> None:
    """The project's files under ``dest``, copied with their times: BuildKit then sends only changed ones."""
    if not files.tracked:
        print(f"envkit: the image holds {files.source()}, less its .dockerignore", file=sys.stderr)
    for name in files.paths:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(files.root / name, dest / name)


def _stage_certificates(certificates: Iterable[Path], dest: Path) -> None:
    dest.mkdir()
    for cert in certificates:
        cert = Path(cert)
        if not cert.is_file():
            raise EnvkitError(f"CA certificate {cert} does not exist: give a PEM file")
        data = load_bytes(cert)
        if b"-----BEGIN CERTIFICATE-----" not in data:
            raise EnvkitError(
                f"CA certificate {cert} is not PEM: give a file with '-----BEGIN CERTIFICATE-----' blocks"
            )
        secret = secrets.by_content(data)  # a CA's cert and key in one file (mitmproxy-ca.pem): the image publishes it
        if secret is not None:
            raise EnvkitError(
                f"CA certificate {cert} {secret}, which every image of it would publish: give a file of the "
                f"certificate alone (openssl x509 -in {shlex.quote(str(cert))} -out {shlex.quote(cert.stem + '.crt')})"
            )
        # update-ca-certificates only picks up *.crt files.
        staged = dest / f"{cert.stem}.crt"
        if staged.exists() and load_bytes(staged) != data:
            raise EnvkitError(f"two different CA certificates are named {cert.stem}: rename one of them")
        # A plain write: the staging directory is scratch, wiped before every build.
        staged.write_bytes(data)


def _stage_wheels(wheelhouse: Path | None, dest: Path) -> None:
    dest.mkdir()
    if wheelhouse is None:
        return
    if not wheelhouse.is_dir():
        raise EnvkitError(f"--wheelhouse {wheelhouse} is not a directory: give a directory of *.whl files")
    wheels = sorted(wheelhouse.glob("*.whl"))
    if not wheels:
        raise EnvkitError(
            f"--wheelhouse {wheelhouse} holds no *.whl files: fill it with 'pip download -d {wheelhouse} ...'"
        )
    for wheel in wheels:
        try:
            os.link(wheel, dest / wheel.name)  # wheels are large; a hard link costs nothing
        except OSError:
            shutil.copy2(wheel, dest / wheel.name)


def context_digest(
    context: Path, build_args: Mapping[str, str], builder: str = BUILDERS[0], platform: str | None = None
) -> str:
    """sha256 over the staged files (each as path + NUL + bytes), the content build args, the
    builder and a platform other than the engine's own (each only when given, so native builds
    on the Docker engine keep the tags they had)."""
    total = hashlib.sha256()
    files = sorted((p for p in context.rglob("*") if p.is_file()), key=lambda p: p.relative_to(context).as_posix())
    for path in files:
        entry = hashlib.sha256(path.relative_to(context).as_posix().encode() + b"\0")
        total.update(hash_file(path, entry, limit=None).digest())  # wheels are large
    content_args = {k: v for k, v in build_args.items() if k not in PROVENANCE_ARGS}
    total.update(json.dumps(content_args, sort_keys=True).encode())
    if builder != BUILDERS[0]:
        total.update(f"builder={builder}".encode())
    if platform:
        total.update(f"platform={platform}".encode())
    return total.hexdigest()


def build_args_for(options: BuildOptions, revision: str | None, source_date_epoch: str | None = None) -> dict[str, str]:
    """Only overrides: every arg has its default from the config in the Dockerfile."""
    args: dict[str, str] = {}
    if options.base_image:
        args["BASE_IMAGE"] = options.base_image
        args["BASE_DIGEST"] = split_reference(options.base_image)[1] or ""  # the label must not name the config's base
    if options.wheelhouse is not None:
        args["PIP_NO_INDEX"] = "1"
        args["TORCH_FIND_LINKS"] = ""  # offline: PyTorch's pages are out of reach, the wheelhouse has its wheels
    if revision:
        args["ENVKIT_REVISION"] = revision
    if source_date_epoch:
        args["SOURCE_DATE_EPOCH"] = source_date_epoch
    args.update(options.build_args)
    secret = index_secret(options.build_args)
    if secret is not None:
        args[INDEX_ARG] = _bare_url(secret)
    return args


def source_date_epoch(root: Path, target_name: str, output: Output) -> str | None:
    """The commit time of the target's rendered files (<output.images>/<target>/), else their newest mtime.

    Not HEAD's time: an unrelated commit must not invalidate the build cache of every
    layer below the ARG. A checkout that is not a git repository falls back to the
    files' own times, which two builds from one checkout share.
    """
    rendered = output.image_folder(root, target_name)
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "log", "-1", "--format=%ct", "--", (output.images / target_name).as_posix()],
            capture_output=True,
            text=True,
            check=False,
        )
        committed = done.stdout.strip()
    except OSError:
        committed = ""
    if committed.isdigit():
        return committed
    times = [int(path.stat().st_mtime) for path in rendered.glob("*") if path.is_file()]
    return str(max(times)) if times else None


def git_revision(root: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    return done.stdout.strip() or None


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
    private_folder(context.parent)  # it holds the project's files
    with open(context.parent / f".{context.name}.lock", "w") as lock:  # its time: this context's last use
        fcntl.flock(lock, fcntl.LOCK_EX)  # two builds of one target must not stage into each other
        shutil.rmtree(context, ignore_errors=True)
        _trim_contexts(context.parent, context)
        yield context


# Staged contexts kept (each the size of a target's wheelhouse and project files): those of the projects and targets
# built lately. One is made for every project folder built, and a project moved or removed left its context behind.
CONTEXTS_KEPT = 16


def _trim_contexts(folder: Path, current: Path) -> None:
    """The least recently used contexts beyond CONTEXTS_KEPT removed, each only while no build holds its lock (its
    time is the context's last use)."""
    others = [lock for lock in folder.glob(".*.lock") if lock.name != f".{current.name}.lock"]
    for lock_path in beyond(others, CONTEXTS_KEPT - 1):  # the current one is the most recently used
        try:
            with open(lock_path, "a") as lock:  # "a": taking it must not make it the most recently used
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(folder / lock_path.name[1 : -len(".lock")], ignore_errors=True)
                lock_path.unlink()
        except OSError:
            continue  # in use by a build (or gone): kept

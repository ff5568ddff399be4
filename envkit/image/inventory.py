"""What an image holds: its Python distributions, dpkg packages, files, environment and labels.

`envkit verify` compares two builds of one target by their inventories and `envkit diff`
compares any two environments by them. The inventory is read from a filesystem tar
stream: `docker export` of a container that is created but never started, or the
layers of a `docker save` tarball applied in order (whiteouts included), so reading
an image runs nothing inside it.
"""

from __future__ import annotations

import email.parser
import gzip
import hashlib
import posixpath
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterable, Iterator

from envkit.errors import EnvkitError
from envkit.support.bounded_load import parse_json, read_stream
from envkit.render.labels import LOCK_LABEL
from envkit.lock.lockfile import normalise

# dist-info metadata of an installed distribution, anywhere a site or dist-packages sits
_DIST_INFO = re.compile(r"^(?P<dir>.*/(?:site|dist)-packages/[^/]+\.dist-info)/(?P<file>METADATA|RECORD)$")
DPKG_STATUS = "var/lib/dpkg/status"
# Written by the container runtime into every container, whatever the image holds.
RUNTIME_FILES = frozenset({"etc/hostname", "etc/hosts", "etc/resolv.conf", ".dockerenv"})
_CHUNK = 1 << 20


@dataclass
class Inventory:
    """Everything two environments are compared by; ``None`` where a source does not record it."""

    source: str
    python: dict[str, str] | None = None  # normalised name -> version
    python_records: dict[str, str] | None = None  # normalised name -> sha256 of its RECORD
    dpkg: dict[str, str] | None = None  # package (with :arch where dpkg adds it) -> version
    files: dict[str, str] | None = None  # path -> sha256 of the content, or "-> target" for a link
    env: dict[str, str] | None = None
    labels: dict[str, str] | None = None
    versions: dict[str, str | None] = field(default_factory=dict)  # torch, cuda, torch_xla, libtpu, ...
    image_id: str | None = None
    notes: tuple[str, ...] = ()  # warnings about the source, e.g. a results file newer than this envkit


class _Tree:
    """A file tree built from tar members, applying OCI whiteouts between layers."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.small: dict[str, bytes] = {}  # contents of the files the inventory parses

    def _remove(self, path: str, children_only: bool = False) -> None:
        prefix = path + "/" if path else ""
        doomed = [p for p in self.files if p.startswith(prefix) or (p == path and not children_only)]
        for p in doomed:
            del self.files[p]
            self.small.pop(p, None)

    def add_layer(self, members: Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]) -> None:
        for info, stream in members:
            path = posixpath.normpath(info.name.lstrip("./")) if info.name not in (".", "./") else ""
            if not path or path == ".":
                continue
            directory, base = posixpath.split(path)
            if base == ".wh..wh..opq":  # opaque directory: lower layers' children are gone
                self._remove(directory, children_only=True)
                continue
            if base.startswith(".wh."):
                self._remove(posixpath.join(directory, base[len(".wh."):]))
                continue
            if info.isdir():
                continue
            self._remove(path)
            if info.issym():
                self.files[path] = f"-> {info.linkname}"
            elif info.islnk():
                target = posixpath.normpath(info.linkname.lstrip("./"))
                self.files[path] = self.files.get(target, f"=> {target}")
                if target in self.small:
                    self.small[path] = self.small[target]
            elif info.isreg() and stream is not None:
                digest = hashlib.sha256()
                keep = path == DPKG_STATUS or _DIST_INFO.match(path) is not None
                kept = bytearray()
                while chunk := stream.read(_CHUNK):
                    digest.update(chunk)
                    if keep:
                        kept += chunk
                self.files[path] = digest.hexdigest()
                if keep:
                    self.small[path] = bytes(kept)


def _members(archive: tarfile.TarFile) -> Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]:
    for info in archive:
        yield info, archive.extractfile(info) if info.isreg() else None


def _parse_python(small: dict[str, bytes]) -> tuple[dict[str, str], dict[str, str]]:
    versions: dict[str, str] = {}
    records: dict[str, str] = {}
    for path, data in sorted(small.items()):
        match = _DIST_INFO.match(path)
        if not match or match["file"] != "METADATA":
            continue
        headers = email.parser.BytesHeaderParser().parsebytes(data)
        if not headers.get("Name") or not headers.get("Version"):
            continue
        name = normalise(headers["Name"])
        versions[name] = headers["Version"]
        record = small.get(f"{match['dir']}/RECORD")
        records[name] = hashlib.sha256(record).hexdigest() if record is not None else "no RECORD"
    return versions, records


def parse_dpkg_status(text: str) -> dict[str, str]:
    """Installed packages from dpkg's status file: name[:arch] -> version."""
    packages: dict[str, str] = {}
    for paragraph in text.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): ?(.*)$", paragraph, flags=re.MULTILINE))
        if fields.get("Status", "").endswith(" installed") and "Package" in fields and "Version" in fields:
            arch = fields.get("Architecture", "all")
            name = fields["Package"] if arch in ("all", _host_arch(text)) else f"{fields['Package']}:{arch}"
            packages[name] = fields["Version"]
    return dict(sorted(packages.items()))


def _host_arch(text: str) -> str:
    # The image's native architecture is the one its essential packages carry (dpkg itself).
    match = re.search(r"^Package: dpkg\n(?:.+\n)*?Architecture: (\S+)", text, flags=re.MULTILINE)
    return match.group(1) if match else "amd64"


def _finish(tree: _Tree, inventory: Inventory) -> Inventory:
    inventory.files = {p: d for p, d in sorted(tree.files.items()) if p not in RUNTIME_FILES}
    inventory.python, inventory.python_records = _parse_python(tree.small)
    status = tree.small.get(DPKG_STATUS)
    inventory.dpkg = parse_dpkg_status(status.decode("utf-8", "replace")) if status is not None else {}
    inventory.versions = _versions(inventory.python, inventory.env or {}, inventory.labels or {})
    return inventory


def _versions(python: dict[str, str], env: dict[str, str], labels: dict[str, str]) -> dict[str, str | None]:
    """The versions a comparison is usually about, from the packages themselves."""
    cuda = env.get("CUDA_VERSION") or labels.get("io.envkit.pin.cuda")
    torch = python.get("torch")
    if cuda is None and torch and "+cu" in torch:
        cuda = torch.split("+cu", 1)[1]
    return {
        "python": labels.get("io.envkit.pin.python") or env.get("PYTHON_VERSION"),
        "torch": torch,
        "torchvision": python.get("torchvision"),
        "torch_xla": python.get("torch-xla"),
        "torch_tpu": python.get("torch-tpu"),
        "libtpu": python.get("libtpu") or python.get("libtpu-nightly"),
        "cuda": cuda,
        "lock_sha256": labels.get(LOCK_LABEL) or env.get("ENVKIT_LOCK_SHA256"),
    }


def from_filesystem_tar(stream: IO[bytes], source: str, **known) -> Inventory:
    """An inventory from one flat filesystem tar (what `docker export` streams)."""
    tree = _Tree()
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        tree.add_layer(_members(archive))
    return _finish(tree, Inventory(source=source, **known))


def _env_dict(entries: Iterable[str] | None) -> dict[str, str]:
    return dict(entry.split("=", 1) if "=" in entry else (entry, "") for entry in entries or ())


class _ChunkReader:
    """A read()-able view of the chunk iterator the Docker SDK returns for exports."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.buffer = b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self.buffer) < size:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.buffer += chunk
        if size < 0:
            data, self.buffer = self.buffer, b""
        else:
            data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data


def from_engine_image(client, reference: str) -> Inventory:
    """Inventory of an image in the engine: its config, then `docker export` of a never-started container."""
    import docker

    try:
        image = client.images.get(reference)
    except docker.errors.ImageNotFound:
        raise EnvkitError(f"no image {reference} in the engine: build it, load it, or give a saved .tar.gz / results .json") from None
    config = image.attrs.get("Config") or {}
    # A command is needed to create a container from an image without one; it never runs.
    container = client.containers.create(image.id, command=["true"], entrypoint=[])
    try:
        return from_filesystem_tar(_ChunkReader(iter(container.export())), reference, env=_env_dict(config.get("Env")),
                                   labels=dict(sorted((config.get("Labels") or {}).items())), image_id=image.id)
    finally:
        container.remove(force=True)


def from_saved_tarball(path: Path) -> Inventory:
    """Inventory of a `docker save` tarball (plain or gzip, as `envkit save` writes it)."""
    try:
        with path.open("rb") as probe:
            compressed = probe.read(2) == b"\x1f\x8b"
        # Layers are read in the manifest's order, not the archive's: a gzip stream would be
        # decompressed again from the start for every seek back, so unpack it once.
        with tempfile.TemporaryFile() if compressed else path.open("rb") as raw:
            if compressed:
                with gzip.open(path, "rb") as source:
                    shutil.copyfileobj(source, raw, _CHUNK)
                raw.seek(0)
            with tarfile.open(fileobj=raw, mode="r:") as outer:
                manifest = parse_json(read_stream(outer.extractfile("manifest.json")))[0]
                config_blob = read_stream(outer.extractfile(manifest["Config"]))
                tree = _Tree()
                for layer in manifest["Layers"]:
                    with tarfile.open(fileobj=outer.extractfile(layer), mode="r|*") as archive:
                        tree.add_layer(_members(archive))
        config = parse_json(config_blob).get("config") or {}
    except (OSError, EOFError, KeyError, IndexError, AttributeError, TypeError, tarfile.TarError, ValueError) as exc:
        raise EnvkitError(f"{path} is not a readable 'docker save' tarball ({exc})") from None
    # The image ID is the sha256 of the config blob exactly as saved.
    return _finish(tree, Inventory(source=str(path), env=_env_dict(config.get("Env")),
                                   labels=dict(sorted((config.get("Labels") or {}).items())),
                                   image_id="sha256:" + hashlib.sha256(config_blob).hexdigest()))


def from_environment(source: str, environment: dict, notes: tuple[str, ...] = ()) -> Inventory:
    """What a results file's ``environment`` (envkit.runs.results, already validated) says produced it."""
    distributions = environment.get("distributions")
    python = None
    if isinstance(distributions, list):
        pairs = (entry.partition("==") for entry in distributions)
        python = dict(sorted((normalise(name), version) for name, _, version in pairs))
    keys = ("python", "torch", "torchvision", "torch_xla", "torch_tpu", "lock_sha256")
    # An image's "cuda" is the CUDA it ships; a run records the CUDA its torch was built for (torch_cuda_build).
    versions = {**{key: environment.get(key) for key in keys}, "cuda": environment.get("torch_cuda_build")}
    return Inventory(source=source, python=python, versions=versions,
                     image_id=environment.get("image_id") or environment.get("image"), notes=notes)

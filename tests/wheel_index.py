"""Package indexes for tests: tiny wheels written directly as zip files (and source distributions as tar.gz),
served over PEP 503 "simple" pages by http.server on 127.0.0.1, so locks resolve without a network.

Wheels are byte-identical on every run (fixed zip timestamps, sorted entries), so
their sha256 hashes, and the locks that record them, can be golden text.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import html
import io
import os
import re
import shutil
import tarfile
import threading
import urllib.parse
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def wheel_bytes(
    name: str, version: str, requires: tuple[str, ...] = (), tag: str = "py3-none-any"
) -> tuple[str, bytes]:
    """(file name, contents) of a wheel with no code (pure Python unless ``tag`` says otherwise): metadata
    and the file name's tags are all a resolver reads."""
    dist = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    info = f"{dist}.dist-info"
    files = {
        f"{info}/METADATA": "Metadata-Version: 2.1\n"
        f"Name: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: envkit-tests\nRoot-Is-Purelib: true\nTag: {tag}\n",
    }
    record = "".join(f"{path},sha256={_digest(text)},{len(text.encode())}\n" for path, text in files.items())
    files[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(files):
            archive.writestr(zipfile.ZipInfo(path, ZIP_TIME), files[path])
    return f"{dist}-{tag}.whl", buffer.getvalue()


def sdist_bytes(name: str, version: str) -> tuple[str, bytes]:
    """(file name, contents) of a source distribution holding its PKG-INFO alone, byte-identical on every run: a
    resolver that builds nothing (uv's --no-build) only sees that it is there and no wheel is."""
    dist = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    info = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    member = tarfile.TarInfo(f"{dist}/PKG-INFO")
    member.size = len(info)
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as compressed:
        with tarfile.open(fileobj=compressed, mode="w") as archive:
            archive.addfile(member, io.BytesIO(info))
    return f"{dist}.tar.gz", buffer.getvalue()


def _digest(text: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


class SimpleIndex:
    """A PEP 503 index in ``root`` (one page per project; links carry #sha256= unless ``link_hashes`` is off,
    as PyTorch's index served torch without hashes until October 2025, so the installer must hash each file)."""

    def __init__(self, root: Path, url: str, link_hashes: bool = True):
        self.root = root
        self.url = url  # ends with "/"
        self.link_hashes = link_hashes
        root.mkdir(parents=True, exist_ok=True)

    def publish(self, wheel: Path) -> Path:
        """Serve an existing wheel file (hard-linked where possible, never altered); returns where it is served."""
        project = self.root / re.sub(r"[-_.]+", "-", wheel.name.split("-", 1)[0]).lower()
        project.mkdir(exist_ok=True)
        served = project / wheel.name
        try:
            os.link(wheel, served)
        except OSError:
            shutil.copyfile(wheel, served)
        self._write_pages(project)
        return served

    def add(self, name: str, version: str, *requires: str, tag: str = "py3-none-any") -> str:
        """Publish a wheel; returns its sha256."""
        return self._publish(name, *wheel_bytes(name, version, requires, tag))

    def add_sdist(self, name: str, version: str) -> str:
        """Publish a version as a source distribution only (no wheel); returns its sha256."""
        return self._publish(name, *sdist_bytes(name, version))

    def _publish(self, name: str, filename: str, data: bytes) -> str:
        project = self.root / re.sub(r"[-_.]+", "-", name).lower()
        project.mkdir(exist_ok=True)
        (project / filename).write_bytes(data)
        self._write_pages(project)
        return hashlib.sha256(data).hexdigest()

    def _write_pages(self, project: Path) -> None:
        links = "".join(
            f'<a href="{urllib.parse.quote(wheel.name)}{self._fragment(wheel)}">{html.escape(wheel.name)}</a>\n'
            for wheel in sorted(project.glob("*.whl")) + sorted(project.glob("*.tar.gz"))
        )
        (project / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
        names = "".join(f'<a href="{p.name}/">{p.name}</a>\n' for p in sorted(self.root.iterdir()) if p.is_dir())
        (self.root / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{names}</body></html>\n")

    def _fragment(self, wheel: Path) -> str:
        return f"#sha256={file_sha256(wheel)}" if self.link_hashes else ""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - http.server's signature
        pass

    def end_headers(self):
        # Index pages change within a test (a new release): never let uv reuse an old one.
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()


class IndexServer:
    """http.server on a free loopback port serving ``root``; indexes live in its subdirectories."""

    def __init__(self, root: Path):
        self.root = root
        handler = functools.partial(_QuietHandler, directory=str(root))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> IndexServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def index(self, name: str, link_hashes: bool = True) -> SimpleIndex:
        host, port = self.server.server_address[:2]
        return SimpleIndex(self.root / name, f"http://{host}:{port}/{name}/", link_hashes)

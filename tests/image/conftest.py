"""Fixtures for the image tests: a staged project, an in-memory engine and a fake buildah (tests/image_fakes.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from image_fakes import FakeBuildah, FakeClient, FakeImage

from envkit.image import archive as image_archive
from envkit.image import build as image_build
from envkit.support import provenance


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "docker" / "cpu").mkdir(parents=True)
    (root / "docker" / "cpu" / "Dockerfile").write_text("FROM scratch\n")
    (root / "docker" / "cpu" / ".dockerignore").write_text("**/__pycache__\n")
    for name in provenance.shipped():  # the run wrapper's files
        (root / "docker" / "cpu" / name).write_text("# the run wrapper\n")
    (root / "recipes" / "__pycache__").mkdir(parents=True)
    (root / "recipes" / "mnist.py").write_text("print('mnist')\n")
    (root / "recipes" / "__pycache__" / "mnist.cpython-311.pyc").write_bytes(b"\0junk")
    # The image holds what git tracks: the recipe, not the rendered files or the caches beside it.
    git = ["git", "-C", str(root)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "recipes/mnist.py"], check=True)
    return root


@pytest.fixture
def engine(monkeypatch):
    image = FakeImage(
        id="sha256:" + "ab" * 32,
        tags=["envkit-cpu:0123456789ab", "envkit-cpu:latest"],
        labels={"io.envkit.pin.torch": "2.13.0", "io.envkit.kind": "cpu"},
    )
    client = FakeClient(image)
    for module in (image_build, image_archive):
        monkeypatch.setattr(module, "connect_docker", lambda: client)
    return client


@pytest.fixture
def fake_buildah(tmp_path, monkeypatch):
    buildah = FakeBuildah(tmp_path)
    monkeypatch.setenv("BUILDAH", str(buildah.executable))
    monkeypatch.setenv("FAKE_BUILDAH_STATE", str(buildah.state_path))
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(image_build, "git_revision", lambda root: "abc123")
    monkeypatch.setattr(image_build, "source_date_epoch", lambda root, name, output: "1700000000")
    return buildah

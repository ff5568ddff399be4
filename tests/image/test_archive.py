"""envkit.image.archive: save and load with manifests, against a small in-memory engine."""

from __future__ import annotations

import gzip
import hashlib
import json
import os

import pytest
from image_fakes import FakeTarget, envkit

from envkit.errors import EnvkitError
from envkit.image import archive as image_archive
from envkit.image import build as image_build


def test_save_writes_a_deterministic_tarball_and_a_manifest(engine, tmp_path):
    tarball, manifest_path = image_archive.save(FakeTarget(), None, tmp_path / "out")
    assert tarball.name == "envkit-cpu-0123456789ab.tar.gz"
    assert manifest_path.name == "envkit-cpu-0123456789ab.manifest.json"
    assert engine.images.image.saved_as == ["envkit-cpu:0123456789ab"]
    manifest = json.loads(manifest_path.read_text())
    data = tarball.read_bytes()
    assert manifest["sha256"] == hashlib.sha256(data).hexdigest()
    assert manifest["size"] == len(data)
    assert manifest["tag"] == "envkit-cpu:0123456789ab"
    assert manifest["image_id"] == engine.images.image.id
    assert manifest["pins"] == {"torch": "2.13.0"}  # from the image's own label
    assert gzip.decompress(data) == engine.images.image.payload
    first = data
    tarball.unlink()
    image_archive.save(FakeTarget(), None, tmp_path / "out")
    assert tarball.read_bytes() == first
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no partial files left
    umask = os.umask(0)
    os.umask(umask)
    assert tarball.stat().st_mode & 0o777 == 0o666 & ~umask  # shareable, unlike mkstemp's 0600


def test_load_verifies_then_loads_and_tags(engine, tmp_path):
    tarball, manifest_path = image_archive.save(FakeTarget(), None, tmp_path)
    engine.images.image.tags.clear()
    assert image_archive.load(tarball) == "envkit-cpu:0123456789ab"
    assert engine.images.loaded == [tarball.read_bytes()]
    assert set(engine.images.image.tags) == {"envkit-cpu:0123456789ab", "envkit-cpu:latest"}
    assert image_archive.load(manifest_path) == "envkit-cpu:0123456789ab"  # either file of the pair


def test_load_refuses_a_tarball_whose_checksum_does_not_match(engine, tmp_path):
    tarball, _ = image_archive.save(FakeTarget(), None, tmp_path)
    data = bytearray(tarball.read_bytes())
    data[-1] ^= 0xFF
    tarball.write_bytes(bytes(data))
    with pytest.raises(EnvkitError, match="refusing to load .* does not match the manifest"):
        image_archive.load(tarball)
    assert engine.images.loaded == []


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m.pop("sha256"), "no valid 'sha256'"),
        (lambda m: m.update(sha256="XYZ"), "malformed sha256"),
        (lambda m: m.update(size="big"), "no valid 'size'"),
        (lambda m: m.update(tarball="../../etc/passwd"), "a bare file name is expected"),
        (lambda m: m.update(manifest_version=99), "upgrade envkit"),
        (lambda m: m.update(tag="ubuntu:latest"), "envkit-<target>:<12 hex> expected"),
    ],
)
def test_load_refuses_a_malformed_manifest(engine, tmp_path, edit, message):
    tarball, manifest_path = image_archive.save(FakeTarget(), None, tmp_path)
    manifest = json.loads(manifest_path.read_text())
    edit(manifest)
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(EnvkitError, match=message):
        image_archive.load(tarball)
    assert engine.images.loaded == []


def test_load_without_a_manifest_is_refused(engine, tmp_path):
    tarball, manifest_path = image_archive.save(FakeTarget(), None, tmp_path)
    manifest_path.unlink()
    with pytest.raises(EnvkitError, match="manifest .* is missing"):
        image_archive.load(tarball)
    with pytest.raises(EnvkitError, match="neither an image tarball"):
        image_archive.load(tmp_path / "image.zip")


def test_load_notices_an_image_that_is_not_the_one_saved(engine, tmp_path):
    tarball, manifest_path = image_archive.save(FakeTarget(), None, tmp_path)
    manifest = json.loads(manifest_path.read_text())
    manifest["image_id"] = "sha256:" + "cd" * 32
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(EnvkitError, match="is not in the engine"):
        image_archive.load(tarball)


def test_missing_image_says_how_to_build_it(engine):
    with pytest.raises(EnvkitError, match="build it first with 'envkit build cpu'"):
        image_build.resolve_image(engine, "cpu", "nosuchtag")


def test_cli_load_refuses_a_tampered_tarball_in_one_line(tmp_path):
    tarball = tmp_path / "envkit-cpu-0123456789ab.tar.gz"
    tarball.write_bytes(gzip.compress(b"x", mtime=0))
    manifest = {
        "manifest_version": 1,
        "tag": "envkit-cpu:0123456789ab",
        "image_id": "sha256:" + "ab" * 32,
        "tarball": tarball.name,
        "sha256": "0" * 64,
        "size": 1,
        "pins": {},
    }
    (tmp_path / "envkit-cpu-0123456789ab.manifest.json").write_text(json.dumps(manifest))
    done = envkit("load", str(tarball))
    assert done.returncode == 2
    assert "refusing to load" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_an_image_without_its_content_tag_is_not_saved_as_latest(engine, tmp_path):
    engine.images.image.tags.remove("envkit-cpu:0123456789ab")
    with pytest.raises(EnvkitError, match="lost its content tag"):
        image_archive.save(FakeTarget(), None, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_save_into_an_unwritable_place_is_one_line(engine, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(EnvkitError, match="cannot create --output-dir .*: Not a directory"):
        image_archive.save(FakeTarget(), None, blocker / "out")

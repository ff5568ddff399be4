"""envkit.image.verify: rebuild and compare, with the builders faked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from image_fakes import DaemonImages, FakeClient, FakeImage, FakeTarget, buildah_project

from envkit.errors import EnvkitError
from envkit.image import build as image_build
from envkit.image import build_context
from envkit.image import verify as image_verify


def saved_tar(path: Path) -> Path:
    """A one-layer `docker save` tar (what `buildah push IMAGE docker-archive:PATH` writes)."""
    import io
    import tarfile

    def tar(members: dict[str, bytes]) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
        return buffer.getvalue()

    layer = tar({"opt/envkit/recipes/mnist.py": b"print()\n", "var/lib/dpkg/status": b""})
    manifest = json.dumps([{"Config": "c.json", "Layers": ["l/layer.tar"]}]).encode()
    path.write_bytes(tar({"manifest.json": manifest, "c.json": b'{"config": {}}', "l/layer.tar": layer}))
    return path


@pytest.fixture
def verifiable(project, fake_buildah, monkeypatch, tmp_path):
    """A project built once with buildah into a faked engine; the engine's image carries buildah's label."""
    client = FakeClient(FakeImage(id="", tags=[], labels={}))
    client.images = DaemonImages(fake_buildah, base="envkit-base:bookworm-x")
    monkeypatch.setattr(image_build, "connect_docker", lambda: client)
    monkeypatch.setattr("envkit.support.docker_client.connect_docker", lambda: client)
    options = build_context.BuildOptions(builder="buildah")
    built = image_build.build(buildah_project(project), FakeTarget(), options)
    client.images.get(built.tag).labels["io.buildah.version"] = "1.28.2"
    monkeypatch.setenv("FAKE_ARCHIVE", str(saved_tar(tmp_path / "saved.tar")))
    return built, options


def test_verify_of_a_buildah_image_compares_manifest_digests(project, fake_buildah, verifiable):
    built, options = verifiable
    verdict = image_verify.verify(project, FakeTarget(), build_context.BuildOptions())  # the builder from the label
    assert verdict.identical and verdict.reproduced
    assert verdict.format().splitlines()[-2:] == [f"identical: {built.digest}", "reproduced"]
    rebuild = fake_buildah.calls("bud")[-1]
    assert "--no-cache" in rebuild and rebuild[rebuild.index("-t") + 1] == "envkit-cpu:verify"
    names = [name for image in fake_buildah.state["images"] for name in image["names"]]
    assert "localhost/envkit-cpu:verify" not in names and "localhost/envkit-cpu:latest" in names


def test_verify_reads_both_buildah_images_when_their_digests_differ(project, fake_buildah, verifiable, monkeypatch):
    built, options = verifiable
    monkeypatch.setenv("FAKE_BUILDAH_SALT", "another buildah")
    verdict = image_verify.verify(project, FakeTarget(), build_context.BuildOptions(), "buildah")
    assert not verdict.identical and verdict.digests[0] == built.digest
    assert f"digests differ: {built.digest} (current)" in verdict.format()
    assert verdict.reproduced and verdict.format().endswith("files: 0 of 2 differ in content\nreproduced")
    assert [call[-1].split(":", 1)[0] for call in fake_buildah.calls("push")[-2:]] == ["docker-archive"] * 2
    assert "localhost/envkit-cpu:verify" not in [n for image in fake_buildah.state["images"] for n in image["names"]]


def test_verify_refuses_a_rebuild_from_other_inputs(project, fake_buildah, verifiable):
    with pytest.raises(EnvkitError, match=r"envkit-cpu:\w{12} was built from other inputs .* pass the same --builder"):
        image_verify.verify(
            project, FakeTarget(), build_context.BuildOptions(base_image="envkit-base:other"), "buildah"
        )


@pytest.mark.parametrize(
    "builder, message",
    [
        (None, "no image envkit-cpu:latest in the engine: build it first with 'envkit build cpu'"),
        (
            "buildah",
            "no image envkit-cpu:latest in buildah's storage: build it first with 'envkit build cpu --builder buildah'",
        ),
    ],
)
def test_verify_of_a_target_never_built_is_one_line_and_builds_nothing(
    project, fake_buildah, engine, monkeypatch, builder, message
):
    engine.images.image.tags.clear()
    monkeypatch.setattr("envkit.support.docker_client.connect_docker", lambda: engine)
    with pytest.raises(EnvkitError, match=re.escape(message)) as caught:
        image_verify.verify(project, FakeTarget(), build_context.BuildOptions(), builder)
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)
    assert fake_buildah.calls("bud") == [] and not build_context.staging_path(project, "cpu").exists()

"""`envkit push` of a target of several platforms: one manifest list (buildah manifest create/add/push) of the
engine's images of the same inputs, its digest recorded in pushed.json with each platform's image.

The fast tests choose the images with a stand-in engine. The slow one pushes to a real local docker-registry an
amd64 and an arm64 image of a few bytes each (FROM scratch and a COPY: BuildKit assembles the arm64 one with no
emulator, since nothing runs in it).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import urllib.request
from dataclasses import dataclass, field

import pytest
from docker_engine import engine_test, envkit, unavailable

from envkit.errors import EnvkitError
from envkit.image import build as image_build
from envkit.image import buildah

INPUTS = {"io.envkit.target": "cpu", "io.envkit.config-hash": "c" * 64, "org.opencontainers.image.revision": "r1"}


@dataclass
class Image:
    id: str
    architecture: str
    created: str
    labels: dict = field(default_factory=lambda: dict(INPUTS))
    tags: list = field(default_factory=list)

    @property
    def attrs(self) -> dict:
        return {"Os": "linux", "Architecture": self.architecture, "Created": self.created}


class Target:
    name = "cpu"
    platforms = ("linux/amd64", "linux/arm64")


def engine(*images: Image):
    return type("Client", (), {"images": type("Images", (), {"list": lambda self, name: list(images)})()})()


def test_each_platform_takes_the_newest_image_of_the_same_inputs():
    native = Image("sha256:a1", "amd64", "2026-11-26T01:00:00Z")
    another_native = Image("sha256:a0", "amd64", "2026-11-26T02:00:00Z")  # newer, but the pushed one has its platform
    arm_old = Image("sha256:b0", "arm64", "2026-11-25T00:00:00Z")
    arm_new = Image("sha256:b1", "arm64", "2026-11-26T00:00:00Z")
    arm_other_inputs = Image("sha256:b2", "arm64", "2026-11-27T00:00:00Z", labels={**INPUTS, "io.envkit.lock": "x"})
    s390x = Image("sha256:c0", "s390x", "2026-11-27T00:00:00Z")
    client = engine(another_native, arm_old, arm_new, arm_other_inputs, s390x, native)
    found = image_build.platform_images(client, Target(), native)
    assert {platform: image.id for platform, image in found.items()} == {
        "linux/amd64": "sha256:a1",
        "linux/arm64": "sha256:b1",
    }


def test_several_platforms_without_buildah_is_one_line(monkeypatch):
    monkeypatch.setenv("BUILDAH", "/nonexistent/buildah")
    images = {"linux/amd64": Image("sha256:a1", "amd64", ""), "linux/arm64": Image("sha256:b1", "arm64", "")}
    with pytest.raises(EnvkitError) as refused:
        image_build._push_list(
            "r.example/envkit-cpu", ("t", "latest"), images, images["linux/amd64"], "r.example", None
        )
    assert str(refused.value) == (
        "pushing linux/amd64, linux/arm64 as one manifest list needs buildah: apt-get install buildah (or set "
        "BUILDAH=/path/to/buildah), or remove the other platforms' images to push linux/amd64 alone"
    )


# ------------------------------------------------------------------ a real registry

TARGET = "pushlist"


def accept(*media_types: str) -> dict:
    return {"Accept": ", ".join(media_types)}


LIST_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")


@engine_test
def test_a_target_of_two_platforms_is_pushed_as_one_manifest_list(client, docker_cli, registry, tmp_path):
    if not buildah.available():
        unavailable("buildah is not installed (apt-get install buildah)")
    (tmp_path / "envkit.yaml").write_text(f'targets:\n  {TARGET}:\n    kind: cpu\n    torch: "2.9.0"\n')
    (tmp_path / "f").write_text("a few bytes\n")
    (tmp_path / "Dockerfile").write_text(f"FROM scratch\nCOPY f /f\nLABEL io.envkit.target={TARGET} io.envkit.t=1\n")
    built = {"linux/amd64": f"envkit-{TARGET}:0000000000aa", "linux/arm64": f"envkit-{TARGET}:0000000000bb"}
    ids = {}
    try:
        for platform, tag in built.items():
            extra = ["-t", f"envkit-{TARGET}:latest"] if platform == "linux/amd64" else []
            subprocess.run(
                [*shlex.split(docker_cli), "build", "-q", "--platform", platform, "-t", tag, *extra, str(tmp_path)],
                env={**os.environ, "DOCKER_BUILDKIT": "1"},
                check=True,
                capture_output=True,
            )
            ids[platform] = client.images.get(tag).id
        done = envkit("push", TARGET, "--registry", f"{registry}/team", cwd=tmp_path)
        remote = f"{registry}/team/envkit-{TARGET}"
        *tags, by_digest = done.stdout.split()
        assert tags == [f"{remote}:0000000000aa", f"{remote}:latest"]
        record = json.loads((tmp_path / "docker" / TARGET / "pushed.json").read_text())["images"][remote]
        platforms = {platform: {"image_id": image_id} for platform, image_id in ids.items()}
        digest = record["latest"]["digest"]
        assert record == {tag.rpartition(":")[2]: {"digest": digest, "image_id": ids["linux/amd64"],
                                                   "platforms": platforms} for tag in tags}  # fmt: skip
        assert by_digest == f"{remote}@{digest}"
        # The registry holds one list under both tags, whose digest is the one recorded, naming both platforms.
        for tag in ("0000000000aa", "latest"):
            url = f"http://{registry}/v2/team/envkit-{TARGET}/manifests/{tag}"
            with urllib.request.urlopen(urllib.request.Request(url, headers=accept(*LIST_TYPES)), timeout=30) as got:
                assert got.headers["Docker-Content-Digest"] == digest
                listed = json.load(got)
            assert sorted(f"{m['platform']['os']}/{m['platform']['architecture']}" for m in listed["manifests"]) == [
                "linux/amd64",
                "linux/arm64",
            ]
        # This amd64 engine pulls its own image by the list's digest; buildah keeps nothing of the push.
        assert client.images.pull(by_digest).id == ids["linux/amd64"]
        names = subprocess.run([*buildah.cli(), "images", "--all", "--json"], capture_output=True, text=True).stdout
        assert TARGET not in names and "envkit-manifest-list" not in names
    finally:
        for image_id in ids.values():  # every name of it, the pulled reference included
            client.images.remove(image_id, force=True)

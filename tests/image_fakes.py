"""A small in-memory engine and a staged project for the image tests (tests/image/): no Docker engine needed.

The classes and functions the tests call by name live here, because a conftest cannot be imported;
the fixtures built from them (project, engine, fake_buildah) are in tests/image/conftest.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from envkit.image import build_context


@dataclass(frozen=True)
class FakeTarget:
    name: str = "cpu"
    kind: str = "cpu"
    ca_certificates: tuple[Path, ...] = ()
    platforms: tuple[str, ...] = ("linux/amd64", "linux/arm64")
    torch: str = "2.13.0"

    def pins(self) -> dict[str, str]:
        return {"python": "3.11", "torch": "2.13.0"}


def staged(
    project: Path,
    tmp_path: Path,
    options=build_context.BuildOptions(),  # noqa: B008 - a frozen record, shared safely
    target=FakeTarget(),
    name="ctx",
) -> Path:
    dest = tmp_path / name
    build_context.stage_context(project, target, options, dest)
    return dest


def files(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())


@dataclass
class FakeImage:
    id: str
    tags: list[str]
    labels: dict[str, str]
    payload: bytes = b"layer-bytes" * 1000
    saved_as: list = field(default_factory=list)
    attrs: dict = field(default_factory=lambda: {"Size": 1_130_000_000})

    def save(self, named):
        self.saved_as.append(named)
        yield self.payload[:5000]
        yield self.payload[5000:]

    def tag(self, repository, tag):
        self.tags.append(f"{repository}:{tag}")


class FakeImages:
    def __init__(self, image: FakeImage):
        self.image, self.loaded = image, []

    def get(self, reference):
        import docker

        if reference == self.image.id or reference in self.image.tags:
            return self.image
        raise docker.errors.ImageNotFound(reference)

    def load(self, stream):
        self.loaded.append(stream.read())
        return [self.image]


class FakeClient:
    def __init__(self, image, architecture: str = "x86_64"):
        self.images = FakeImages(image)
        self.architecture = architecture

    def info(self):
        return {"Architecture": self.architecture}


def envkit(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, cwd=cwd, env=env)


FAKE_BUILDAH = r"""
import fcntl, hashlib, json, os, sys
state_path = os.environ["FAKE_BUILDAH_STATE"]
lock = open(state_path + ".lock", "w")
fcntl.flock(lock, fcntl.LOCK_EX)  # verify runs two at once, as buildah's storage allows
state = json.load(open(state_path)) if os.path.exists(state_path) else {"images": [], "calls": []}
argv = sys.argv[1:]
state["calls"].append(argv)

def save():
    json.dump(state, open(state_path, "w"))

def named(ref):
    for image in state["images"]:
        if ref in (image["id"], image["id"][7:]) or ref in image["names"] or "localhost/" + ref in image["names"]:
            return image

def listing(image):
    return {"id": image["id"], "names": image["names"], "digest": image["digest"]}

def local(name):
    return name if "/" in name.split(":")[0] else "localhost/" + name

command = argv[0]
if command == "--version":
    print("buildah version 1.28.2 (image-spec 1.1.0-rc2, runtime-spec 1.0.2-dev)")
elif command == "bud" and "--help" in argv:
    print("      --timestamp int   set created timestamp to the specified epoch seconds")
elif command == "bud":
    tags = [argv[i + 1] for i, a in enumerate(argv) if a == "-t"]
    stamp = argv[argv.index("--timestamp") + 1] if "--timestamp" in argv else "now"
    salt = os.environ.get("FAKE_BUILDAH_SALT", "")  # another buildah: other bytes from the same context
    config = hashlib.sha256((open(os.path.join(argv[-1], "Dockerfile")).read() + stamp + salt).encode()).hexdigest()
    digest = hashlib.sha256(config.encode()).hexdigest()
    image = named("sha256:" + config)
    if image is None:
        image = {"id": "sha256:" + config, "digest": "sha256:" + digest, "names": [], "size": 1_060_000_000}
        state["images"].append(image)
    for tag in tags:
        for other in state["images"]:
            if local(tag) in other["names"]:
                other["names"].remove(local(tag))
        image["names"].append(local(tag))
    print("STEP 1/1: FROM base")
    save()
    sys.exit(int(os.environ.get("FAKE_RC", "0")))
elif command == "images":
    image = named(argv[-1])
    if image is None:
        sys.exit(125)
    print(json.dumps([listing(image)]))
elif command == "inspect":
    image = named(argv[-1])
    print(json.dumps({"Manifest": json.dumps({"layers": [{"size": image["size"]}]})}))
elif command == "push":
    source, destination = argv[-2], argv[-1]
    if destination.startswith("docker-archive:"):
        open(destination.split(":", 1)[1], "wb").write(open(os.environ["FAKE_ARCHIVE"], "rb").read())
    state.setdefault("pushed", []).append([named(source)["id"], destination])
    save()
elif command == "tag":
    named(argv[1])["names"].extend(local(name) for name in argv[2:])
    save()
elif command == "rmi":
    image = named(argv[1])
    image["names"].remove(local(argv[1]))
    if not image["names"]:
        state["images"].remove(image)
    save()
elif command == "pull":
    state["images"].append({"id": "sha256:" + "ba" * 32, "digest": "sha256:" + "5e" * 32, "size": 1,
                            "names": ["docker.io/library/" + argv[-1].split(":", 1)[1]]})
    save()
save()
"""


class FakeBuildah:
    def __init__(self, directory: Path):
        self.state_path = directory / "buildah-state.json"
        self.executable = directory / "buildah"
        self.executable.write_text(f"#!{sys.executable}\n{FAKE_BUILDAH}")
        self.executable.chmod(0o755)

    @property
    def state(self) -> dict:
        return json.loads(self.state_path.read_text()) if self.state_path.exists() else {"images": [], "calls": []}

    def calls(self, command: str) -> list[list[str]]:
        return [call for call in self.state["calls"] if call[0] == command]


class DaemonImages(FakeImages):
    """An engine that holds what buildah pushed to docker-daemon:, and a docker-imported base."""

    def __init__(self, buildah: FakeBuildah, base: str | None = None):
        super().__init__(FakeImage(id="", tags=[], labels={}))
        self.buildah, self.base, self.images = buildah, base, {}

    def get(self, reference):
        import docker

        for image_id, destination in self.buildah.state.get("pushed", []):
            if destination == f"docker-daemon:{reference}":
                return self.images.setdefault(image_id, FakeImage(id=image_id, tags=[reference], labels={}))
        for image in self.images.values():
            if reference in image.tags:
                return image
        if reference == self.base:
            return FakeImage(id="sha256:" + "ba" * 32, tags=[reference], labels={})
        raise docker.errors.ImageNotFound(reference)


def buildah_project(project: Path) -> Path:
    (project / "docker" / "cpu" / "Dockerfile").write_text(
        "ARG BASE_IMAGE=envkit-base:bookworm-x\nFROM ${BASE_IMAGE}\n"
    )
    return project

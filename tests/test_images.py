"""Build context staging, content tags, save/load manifests and bad input, without an engine.

The engine-facing calls are replaced by a small in-memory engine; the real engine is
exercised by tests/test_docker_engine.py.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from envkit.image import build_context
from envkit.image import archive as image_archive
from envkit.image import build as image_build
from envkit.errors import EnvkitError
from envkit.image.names import check_registry

CERT = b"-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


@dataclass(frozen=True)
class FakeTarget:
    name: str = "cpu"
    kind: str = "cpu"
    ca_certificates: tuple[Path, ...] = ()

    def pins(self) -> dict[str, str]:
        return {"python": "3.11", "torch": "2.13.0"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "docker" / "cpu").mkdir(parents=True)
    (root / "docker" / "cpu" / "Dockerfile").write_text("FROM scratch\n")
    (root / "docker" / "cpu" / ".dockerignore").write_text("**/__pycache__\n")
    (root / "recipes" / "__pycache__").mkdir(parents=True)
    (root / "recipes" / "mnist.py").write_text("print('mnist')\n")
    (root / "recipes" / "__pycache__" / "mnist.cpython-311.pyc").write_bytes(b"\0junk")
    return root


def staged(project: Path, tmp_path: Path, options=build_context.BuildOptions(), target=FakeTarget(), name="ctx") -> Path:
    dest = tmp_path / name
    build_context.stage_context(project, target, options, dest)
    return dest


def files(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())


def test_staged_context_has_the_design_layout_without_caches(project, tmp_path):
    context = staged(project, tmp_path)
    assert files(context) == [".dockerignore", "Dockerfile", "recipes/mnist.py"]
    assert (context / "certs").is_dir() and (context / "wheels").is_dir()


def test_wheelhouse_and_certificates_are_staged(project, tmp_path):
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    (wheelhouse / "tqdm-4.0-py3-none-any.whl").write_bytes(b"wheel")
    (wheelhouse / "notes.txt").write_text("not a wheel")
    configured, extra = tmp_path / "corp.pem", tmp_path / "proxy.crt"
    configured.write_bytes(CERT)
    extra.write_bytes(CERT.replace(b"fake", b"other"))
    options = build_context.BuildOptions(wheelhouse=wheelhouse, ca_certs=(extra,))
    context = staged(project, tmp_path, options, FakeTarget(ca_certificates=(configured,)))
    assert "wheels/tqdm-4.0-py3-none-any.whl" in files(context)
    assert "wheels/notes.txt" not in files(context)
    # update-ca-certificates reads *.crt only, so a .pem is renamed
    assert (context / "certs" / "corp.crt").read_bytes() == CERT
    assert (context / "certs" / "proxy.crt").exists()
    # Offline: no index, and no PyTorch project pages either (a locked cpu Dockerfile names them).
    assert build_context.build_args_for(options, None) == {"PIP_NO_INDEX": "1", "TORCH_FIND_LINKS": ""}


@pytest.mark.parametrize(
    "make_options, message",
    [
        (lambda tmp: build_context.BuildOptions(wheelhouse=tmp / "missing"), "is not a directory"),
        (lambda tmp: build_context.BuildOptions(wheelhouse=tmp), "holds no *.whl files"),
        (lambda tmp: build_context.BuildOptions(ca_certs=(tmp / "none.crt",)), "does not exist"),
        (lambda tmp: build_context.BuildOptions(ca_certs=(tmp / "plain.crt",)), "is not PEM"),
    ],
)
def test_bad_build_inputs_are_one_line(project, tmp_path, make_options, message):
    (tmp_path / "plain.crt").write_text("hello")
    with pytest.raises(EnvkitError, match=message.replace("*", r"\*")) as caught:
        staged(project, tmp_path, make_options(tmp_path))
    assert "\n" not in str(caught.value)


def test_unrendered_target_says_how_to_render(project, tmp_path):
    (project / "docker" / "cpu" / "Dockerfile").unlink()
    with pytest.raises(EnvkitError, match="run 'envkit render'"):
        staged(project, tmp_path)


def test_identical_inputs_give_an_identical_tag(project, tmp_path):
    first = build_context.context_digest(staged(project, tmp_path, name="a"), {"BASE_IMAGE": "x"})
    second = build_context.context_digest(staged(project, tmp_path, name="b"), {"BASE_IMAGE": "x"})
    assert first == second and len(first) == 64


def test_tag_follows_content_and_content_args_but_not_the_revision(project, tmp_path):
    context = staged(project, tmp_path)
    base = build_context.context_digest(context, {"ENVKIT_REVISION": "aaa"})
    assert build_context.context_digest(context, {"ENVKIT_REVISION": "bbb"}) == base
    assert build_context.context_digest(context, {"BASE_IMAGE": "other"}) != base
    (context / "recipes" / "mnist.py").write_text("print('mnist')\n# edited\n")
    assert build_context.context_digest(context, {"ENVKIT_REVISION": "aaa"}) != base


def test_renaming_a_file_changes_the_tag(project, tmp_path):
    context = staged(project, tmp_path)
    before = build_context.context_digest(context, {})
    (context / "recipes" / "mnist.py").rename(context / "recipes" / "mnist2.py")
    assert build_context.context_digest(context, {}) != before


def test_build_args_user_values_win_and_revision_is_recorded():
    options = build_context.BuildOptions(base_image="envkit-base:x", build_args={"BASE_IMAGE": "mine", "HTTP_PROXY": "p"})
    assert build_context.build_args_for(options, "abc123", "1700000000") == {
        "BASE_IMAGE": "mine", "BASE_DIGEST": "", "ENVKIT_REVISION": "abc123", "HTTP_PROXY": "p", "SOURCE_DATE_EPOCH": "1700000000",
    }


def test_a_base_image_override_brings_its_own_digest_to_the_label():
    digest = "sha256:" + "ab" * 32
    options = build_context.BuildOptions(base_image=f"registry.example.com/debian:bookworm@{digest}")
    assert build_context.build_args_for(options, None)["BASE_DIGEST"] == digest


def test_source_date_epoch_is_the_commit_time_of_the_rendered_files_and_not_in_the_tag(project, tmp_path):
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], check=True, env={**os.environ, "GIT_COMMITTER_DATE": "@1700000000 +0000"})
    assert build_context.source_date_epoch(project, "cpu") == "1700000000"
    context = staged(project, tmp_path)
    assert build_context.context_digest(context, {"SOURCE_DATE_EPOCH": "1"}) == build_context.context_digest(context, {})


def test_source_date_epoch_outside_git_is_the_newest_rendered_file(project):
    os.utime(project / "docker" / "cpu" / "Dockerfile", (1600000000, 1600000000))
    os.utime(project / "docker" / "cpu" / ".dockerignore", (1500000000, 1500000000))
    assert build_context.source_date_epoch(project, "cpu") == "1600000000"


LOCK = "# inputs-sha256: x\ntqdm==4.67.1 \\\n    --hash=sha256:" + "ab" * 32 + "\n"


def test_a_locked_dockerfile_gets_its_lock_in_the_context(project, tmp_path):
    sha = hashlib.sha256(LOCK.encode()).hexdigest()
    (project / "docker" / "cpu" / "requirements.lock").write_text(LOCK)
    (project / "docker" / "cpu" / "Dockerfile").write_text(f"FROM scratch\nENV ENVKIT_LOCK_SHA256={sha}\n")
    context = staged(project, tmp_path)
    assert (context / "requirements.lock").read_text() == LOCK


@pytest.mark.parametrize(
    "dockerfile, lock, message",
    [
        ("FROM scratch\n", LOCK, r"docker/cpu/Dockerfile was rendered unlocked, but requirements.lock is sha256 \w+: run 'envkit render --target cpu'"),
        ("FROM scratch\nENV ENVKIT_LOCK_SHA256=abc\n", None, r"installs the lock of sha256 abc, but there is no requirements.lock"),
        ("FROM scratch\nENV ENVKIT_LOCK_SHA256=abc\n", LOCK, r"installs the lock of sha256 abc, but requirements.lock is sha256 "),
    ],
)
def test_a_lock_that_is_not_the_rendered_one_is_refused(project, tmp_path, dockerfile, lock, message):
    (project / "docker" / "cpu" / "Dockerfile").write_text(dockerfile)
    if lock:
        (project / "docker" / "cpu" / "requirements.lock").write_text(lock)
    with pytest.raises(EnvkitError, match=message):
        staged(project, tmp_path)


@pytest.mark.parametrize("text", ["NOEQUALS", "=v", "1X=2", "A B=c"])
def test_malformed_build_arg_is_refused(text):
    with pytest.raises(EnvkitError, match="is not KEY=VALUE"):
        build_context.parse_build_arg(text)


def test_build_arg_value_may_hold_equals_signs():
    assert build_context.parse_build_arg("PIP_INDEX_URL=http://h/simple?a=b") == ("PIP_INDEX_URL", "http://h/simple?a=b")


def test_docker_client_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("DOCKER", "definitely-not-a-docker-client")
    with pytest.raises(EnvkitError, match="does not start with an executable"):
        image_build.docker_cli()
    monkeypatch.setenv("DOCKER", sys.executable)
    assert image_build.docker_cli() == [sys.executable]
    monkeypatch.setenv("DOCKER", f"{sys.executable} --host unix:///x.sock")  # several words, as run.sh allows
    assert image_build.docker_cli() == [sys.executable, "--host", "unix:///x.sock"]


# ---------------------------------------------------------------- save / load with an in-memory engine


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
    def __init__(self, image):
        self.images = FakeImages(image)


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


@pytest.mark.parametrize("registry", ["", "https://reg.example.com", "Reg.Example.com", "reg.example.com/", "reg:port", "a b"])
def test_push_refuses_a_malformed_registry_before_touching_the_engine(engine, registry):
    with pytest.raises(EnvkitError, match="is not valid: give HOST"):
        image_build.push(FakeTarget(), registry)
    assert engine.images.image.tags == ["envkit-cpu:0123456789ab", "envkit-cpu:latest"]


@pytest.mark.parametrize("registry", ["localhost:5000", "registry.example.com/team", "10.0.0.2:5000/a/b-c"])
def test_push_and_launch_accept_registry_forms(registry, tmp_path, repo_root):
    from launch_jobs import DIGEST, record_push

    assert check_registry(registry) == registry
    (tmp_path / "envkit.yaml").write_text((repo_root / "envkit.yaml").read_text())
    argv = ("launch", "gpu-ddp-cifar", "--on", "pytorchjob", "--registry", registry, "--dry-run")
    unpushed = envkit(*argv, cwd=tmp_path)  # the form passes; launch then wants the digest envkit push records
    assert unpushed.returncode == 2 and f"was never pushed to {registry} " in unpushed.stderr, unpushed.stderr
    record_push(tmp_path, "cuda", registry)
    done = envkit(*argv, cwd=tmp_path)
    assert done.returncode == 0 and f"image: {registry}/envkit-cuda@{DIGEST}" in done.stdout, done.stderr


@pytest.mark.parametrize("registry", ["https://reg.example.com", "reg example", "reg.example.com/"])
def test_launch_refuses_what_push_refuses(registry, repo_root):
    done = envkit("launch", "gpu-ddp-cifar", "--on", "pytorchjob", "--registry", registry, "--dry-run", cwd=repo_root)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"envkit: error: --registry '{registry}' is not valid: give HOST[:PORT][/PATH] in lowercase, "
                           "e.g. registry.example.com:5000/team\n")


# ---------------------------------------------------------------- through the CLI


def envkit(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_cli_without_an_engine_says_how_to_start_one(repo_root, tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no.sock"}
    done = envkit("build", "cpu", "--config", str(repo_root / "envkit.yaml"), env=env)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "no Docker engine answers" in done.stderr and "systemctl start docker" in done.stderr


def test_cli_load_refuses_a_tampered_tarball_in_one_line(tmp_path):
    tarball = tmp_path / "envkit-cpu-0123456789ab.tar.gz"
    tarball.write_bytes(gzip.compress(b"x", mtime=0))
    manifest = {
        "manifest_version": 1, "tag": "envkit-cpu:0123456789ab", "image_id": "sha256:" + "ab" * 32,
        "tarball": tarball.name, "sha256": "0" * 64, "size": 1, "pins": {},
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


def test_staging_area_is_fixed_per_project_and_starts_empty(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    with build_context.staging_area(tmp_path / "a", "cpu") as first:
        first.mkdir()
        (first / "stale.txt").write_text("left from the last build")
    with build_context.staging_area(tmp_path / "a", "cpu") as again:
        assert again == first and not again.exists()
    assert build_context.staging_path(tmp_path / "b", "cpu") != first
    assert build_context.staging_path(tmp_path / "a", "cuda") != first
    assert first.parent == tmp_path / "cache" / "contexts"


def test_save_into_an_unwritable_place_is_one_line(engine, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(EnvkitError, match="cannot create --output-dir .*: Not a directory"):
        image_archive.save(FakeTarget(), None, blocker / "out")


# ---------------------------------------------------------------- build with a recording docker client


@pytest.fixture
def recording_docker(tmp_path, monkeypatch):
    """A docker client that records its argv and environment, then exits with $FAKE_RC."""
    log = tmp_path / "docker-calls.json"
    client = tmp_path / "fake-docker"
    client.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"with open({str(log)!r}, 'a') as out:\n"
        "    out.write(json.dumps({'argv': sys.argv[1:], 'buildkit': os.environ.get('DOCKER_BUILDKIT')}) + '\\n')\n"
        "sys.exit(int(os.environ.get('FAKE_RC', '0')))\n"
    )
    client.chmod(0o755)
    monkeypatch.setenv("DOCKER", str(client))
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    return lambda: [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


class BuildingImages(FakeImages):
    """Knows no image until the build ran, like an engine before and after."""

    def __init__(self, image):
        super().__init__(image)
        self.built = False

    def get(self, reference):
        import docker

        if not self.built:
            raise docker.errors.ImageNotFound(reference)
        return self.image


def test_build_drives_buildkit_with_both_tags_and_the_args(project, recording_docker, monkeypatch, tmp_path):
    image = FakeImage(id="sha256:" + "ef" * 32, tags=[], labels={})
    client = FakeClient(image)
    client.images = BuildingImages(image)
    for module in (image_build, image_archive):
        monkeypatch.setattr(module, "connect_docker", lambda: client)
    monkeypatch.setattr(image_build, "git_revision", lambda root: "abc123")
    monkeypatch.setattr(image_build, "source_date_epoch", lambda root, name: "1700000000")
    original_build = image_build._docker_build

    def build_then_exist(*args, **kwargs):
        original_build(*args, **kwargs)
        client.images.built = True

    monkeypatch.setattr(image_build, "_docker_build", build_then_exist)
    options = build_context.BuildOptions(no_cache=True, base_image="envkit-base:x", build_args={"HTTP_PROXY": "http://p:3128"})
    built = image_build.build(project, FakeTarget(), options)
    [call] = recording_docker()
    assert call["buildkit"] == "1"
    argv = call["argv"]
    assert argv[:2] == ["build", "--progress=plain"]
    assert argv[argv.index("-t") + 1] == built.tag and f"envkit-cpu:{image_build.LATEST}" in argv
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"] == [
        "BASE_DIGEST=", "BASE_IMAGE=envkit-base:x", "ENVKIT_REVISION=abc123", "HTTP_PROXY=http://p:3128",
        "SOURCE_DATE_EPOCH=1700000000",
    ]
    assert "--no-cache" in argv
    assert argv[-1] == str(build_context.staging_path(project, "cpu"))
    assert built.image_id == image.id and built.size_bytes == 1_130_000_000 and not built.reused


def test_failed_build_is_one_line_after_the_log(project, recording_docker, monkeypatch, engine):
    monkeypatch.setenv("FAKE_RC", "17")
    engine.images.image.tags.clear()  # nothing built yet
    with pytest.raises(EnvkitError, match=r"docker build of envkit-cpu:[0-9a-f]{12} failed \(exit 17\); the build log is above") as caught:
        image_build.build(project, FakeTarget(), build_context.BuildOptions())
    assert caught.value.exit_code == 1


PIP_HASH_FAILURE = """\
#12 [5/7] RUN --mount=type=cache,target=/root/.cache/pip pip install --require-hashes ...
#12 3.210 Looking in links: /wheels
#12 4.020 ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the package versions, please update the hashes. Otherwise, examine the package contents carefully; someone may have tampered with them.
#12 4.020     torch==2.13.0+cpu from file:///wheels/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl:
#12 4.020         Expected sha256 0000000000000000000000000000000000000000000000000000000000000000
#12 4.020              Got        6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b
#12 4.020
#12 ERROR: executor failed running [/bin/sh -c pip install]: exit code: 1
"""


def test_a_hash_mismatch_fails_the_build_with_one_line_naming_the_package(project, recording_docker, monkeypatch, engine, tmp_path):
    log = tmp_path / "build.log"
    log.write_text(PIP_HASH_FAILURE)
    monkeypatch.setenv("FAKE_RC", "1")
    client = Path(os.environ["DOCKER"])
    client.write_text(client.read_text().replace("sys.exit(", f"sys.stdout.write(open({str(log)!r}).read())\nsys.exit("))
    engine.images.image.tags.clear()
    with pytest.raises(EnvkitError) as caught:
        image_build.build(project, FakeTarget(), build_context.BuildOptions())
    assert caught.value.exit_code == 2
    assert re.fullmatch(
        r"docker build of envkit-cpu:[0-9a-f]{12} failed: pip refused torch==2\.13\.0\+cpu: its file has sha256 6746dbcb\w+, "
        r"which the lock does not list \(expected 0{64}\); the lock or the wheel was changed: .*",
        str(caught.value),
    )


def test_an_existing_content_tag_is_reused_without_building(project, recording_docker, monkeypatch, engine):
    context = build_context.staging_path(project, "cpu")
    build_context.stage_context(project, FakeTarget(), build_context.BuildOptions(), context)
    monkeypatch.setattr(image_build, "git_revision", lambda root: None)
    tag = f"envkit-cpu:{build_context.context_digest(context, {})[:build_context.TAG_HEX]}"
    engine.images.image.tags[:] = [tag]
    built = image_build.build(project, FakeTarget(), build_context.BuildOptions())
    assert built.reused and built.tag == tag
    assert recording_docker() == []  # docker build never ran
    assert "envkit-cpu:latest" in engine.images.image.tags


def test_the_build_and_the_recipes_record_one_form_of_git_revision():
    """The build passes ENVKIT_REVISION; a recipe on the host asks git itself: both give the full hash."""
    repo = Path(__file__).resolve().parent.parent
    built = build_context.git_revision(repo)
    env = {k: v for k, v in os.environ.items() if k != "ENVKIT_REVISION"}
    probe = "import harness; print(harness.git_revision())"
    on_host = subprocess.run([sys.executable, "-c", probe], cwd=repo / "recipes", env=env, capture_output=True, text=True, check=True)
    assert re.fullmatch(r"[0-9a-f]{40}", built) and on_host.stdout.strip() == built

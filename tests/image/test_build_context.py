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

from envkit.errors import EnvkitError
from envkit.image import archive as image_archive
from envkit.image import build as image_build
from envkit.image import build_context
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
    options = build_context.BuildOptions(
        base_image="envkit-base:x", build_args={"BASE_IMAGE": "mine", "HTTP_PROXY": "p"}
    )
    assert build_context.build_args_for(options, "abc123", "1700000000") == {
        "BASE_IMAGE": "mine",
        "BASE_DIGEST": "",
        "ENVKIT_REVISION": "abc123",
        "HTTP_PROXY": "p",
        "SOURCE_DATE_EPOCH": "1700000000",
    }


def test_a_base_image_override_brings_its_own_digest_to_the_label():
    digest = "sha256:" + "ab" * 32
    options = build_context.BuildOptions(base_image=f"registry.example.com/debian:bookworm@{digest}")
    assert build_context.build_args_for(options, None)["BASE_DIGEST"] == digest


def test_source_date_epoch_is_the_commit_time_of_the_rendered_files_and_not_in_the_tag(project, tmp_path):
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run(
        [*git, "commit", "-q", "-m", "x"], check=True, env={**os.environ, "GIT_COMMITTER_DATE": "@1700000000 +0000"}
    )
    assert build_context.source_date_epoch(project, "cpu") == "1700000000"
    context = staged(project, tmp_path)
    assert build_context.context_digest(context, {"SOURCE_DATE_EPOCH": "1"}) == build_context.context_digest(
        context, {}
    )


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
        (
            "FROM scratch\n",
            LOCK,
            r"docker/cpu/Dockerfile was rendered unlocked, but requirements.lock is sha256 \w+: run 'envkit render --target cpu'",
        ),
        (
            "FROM scratch\nENV ENVKIT_LOCK_SHA256=abc\n",
            None,
            r"installs the lock of sha256 abc, but there is no requirements.lock",
        ),
        (
            "FROM scratch\nENV ENVKIT_LOCK_SHA256=abc\n",
            LOCK,
            r"installs the lock of sha256 abc, but requirements.lock is sha256 ",
        ),
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
    assert build_context.parse_build_arg("PIP_INDEX_URL=http://h/simple?a=b") == (
        "PIP_INDEX_URL",
        "http://h/simple?a=b",
    )


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


@pytest.mark.parametrize(
    "registry", ["", "https://reg.example.com", "Reg.Example.com", "reg.example.com/", "reg:port", "a b"]
)
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
    assert done.stderr == (
        f"envkit: error: --registry '{registry}' is not valid: give HOST[:PORT][/PATH] in lowercase, "
        "e.g. registry.example.com:5000/team\n"
    )


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
    options = build_context.BuildOptions(
        no_cache=True, base_image="envkit-base:x", build_args={"HTTP_PROXY": "http://p:3128"}
    )
    built = image_build.build(project, FakeTarget(), options)
    [call] = recording_docker()
    assert call["buildkit"] == "1"
    argv = call["argv"]
    assert argv[:2] == ["build", "--progress=plain"]
    assert argv[argv.index("-t") + 1] == built.tag and f"envkit-cpu:{image_build.LATEST}" in argv
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"] == [
        "BASE_DIGEST=",
        "BASE_IMAGE=envkit-base:x",
        "ENVKIT_REVISION=abc123",
        "HTTP_PROXY=http://p:3128",
        "SOURCE_DATE_EPOCH=1700000000",
    ]
    assert "--no-cache" in argv
    assert argv[-1] == str(build_context.staging_path(project, "cpu"))
    assert built.image_id == image.id and built.size_bytes == 1_130_000_000 and not built.reused


def test_failed_build_is_one_line_after_the_log(project, recording_docker, monkeypatch, engine):
    monkeypatch.setenv("FAKE_RC", "17")
    engine.images.image.tags.clear()  # nothing built yet
    with pytest.raises(
        EnvkitError, match=r"docker build of envkit-cpu:[0-9a-f]{12} failed \(exit 17\); the build log is above"
    ) as caught:
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


def test_a_hash_mismatch_fails_the_build_with_one_line_naming_the_package(
    project, recording_docker, monkeypatch, engine, tmp_path
):
    log = tmp_path / "build.log"
    log.write_text(PIP_HASH_FAILURE)
    monkeypatch.setenv("FAKE_RC", "1")
    client = Path(os.environ["DOCKER"])
    client.write_text(
        client.read_text().replace("sys.exit(", f"sys.stdout.write(open({str(log)!r}).read())\nsys.exit(")
    )
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
    tag = f"envkit-cpu:{build_context.context_digest(context, {})[: build_context.TAG_HEX]}"
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
    on_host = subprocess.run(
        [sys.executable, "-c", probe], cwd=repo / "recipes", env=env, capture_output=True, text=True, check=True
    )
    assert re.fullmatch(r"[0-9a-f]{40}", built) and on_host.stdout.strip() == built


# ---------------------------------------------------------------- buildah, faked: its storage is a JSON file

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


@pytest.fixture
def fake_buildah(tmp_path, monkeypatch):
    buildah = FakeBuildah(tmp_path)
    monkeypatch.setenv("BUILDAH", str(buildah.executable))
    monkeypatch.setenv("FAKE_BUILDAH_STATE", str(buildah.state_path))
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(image_build, "git_revision", lambda root: "abc123")
    monkeypatch.setattr(image_build, "source_date_epoch", lambda root, name: "1700000000")
    return buildah


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


def test_buildah_builds_the_same_context_with_the_commit_time_then_moves_the_image_into_the_engine(
    project, fake_buildah, monkeypatch
):
    client = FakeClient(FakeImage(id="", tags=[], labels={}))
    client.images = DaemonImages(fake_buildah, base="envkit-base:bookworm-x")
    monkeypatch.setattr(image_build, "connect_docker", lambda: client)
    options = build_context.BuildOptions(builder="buildah", build_args={"HTTP_PROXY": "http://p:3128"})
    built = image_build.build(buildah_project(project), FakeTarget(), options)

    # The base only the engine held was copied into buildah's storage first: no registry is asked.
    assert fake_buildah.calls("pull") == [["pull", "--quiet", "docker-daemon:envkit-base:bookworm-x"]]
    [bud] = fake_buildah.calls("bud")
    assert bud[:3] == ["bud", "--format", "oci"] and "--layers" in bud and "--no-cache" not in bud
    assert bud[bud.index("--timestamp") + 1] == "1700000000"
    assert [bud[i + 1] for i, a in enumerate(bud) if a == "-t"] == [built.tag, "envkit-cpu:latest"]
    assert [bud[i + 1] for i, a in enumerate(bud) if a == "--build-arg"] == [
        "ENVKIT_REVISION=abc123",
        "HTTP_PROXY=http://p:3128",
        "SOURCE_DATE_EPOCH=1700000000",
    ]
    assert bud[-1] == str(build_context.staging_path(project, "cpu"))

    stored = fake_buildah.state["images"][-1]
    assert (built.builder, built.image_id, built.digest, built.size_bytes) == (
        "buildah",
        stored["id"],
        stored["digest"],
        1_060_000_000,
    )
    assert fake_buildah.state["pushed"] == [[stored["id"], f"docker-daemon:{built.tag}"]]
    assert client.images.get(built.tag).tags == [built.tag, "envkit-cpu:latest"]
    assert built.where == "buildah's storage and the Docker engine" and not built.reused

    # Built again: the content tag is in buildah's storage, so nothing is built or pushed.
    again = image_build.build(project, FakeTarget(), options)
    assert again.reused and again.tag == built.tag and again.digest == built.digest
    assert len(fake_buildah.calls("bud")) == 1 and len(fake_buildah.state["pushed"]) == 1


def test_buildah_and_the_docker_engine_give_one_context_two_tags(project, tmp_path):
    context = staged(project, tmp_path)
    assert build_context.context_digest(context, {}) != build_context.context_digest(context, {}, "buildah")
    assert build_context.context_digest(context, {}, "docker") == build_context.context_digest(context, {})


def test_buildah_without_an_engine_keeps_the_image_in_its_storage(project, fake_buildah, monkeypatch):
    def no_engine():
        raise EnvkitError("no Docker engine answers at unix:///x.sock")

    monkeypatch.setattr(image_build, "connect_docker", no_engine)
    built = image_build.build(
        buildah_project(project), FakeTarget(), build_context.BuildOptions(builder="buildah", no_cache=True)
    )
    assert built.where == "buildah's storage only (no Docker engine to move it into)"
    assert "--no-cache" in fake_buildah.calls("bud")[0] and "pushed" not in fake_buildah.state


def test_builder_buildah_without_buildah_is_one_line_and_writes_nothing(repo_root, tmp_path):
    env = {
        **os.environ,
        "PATH": str(tmp_path / "empty"),
        "ENVKIT_CACHE_DIR": str(tmp_path / "cache"),
        "DOCKER_HOST": f"unix://{tmp_path}/no.sock",
    }
    env.pop("BUILDAH", None)
    done = envkit("build", "cpu", "--builder", "buildah", "--config", str(repo_root / "envkit.yaml"), env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(
        "envkit: error: --builder buildah needs buildah, and buildah is not an executable here: apt-get install buildah"
    )
    assert not (tmp_path / "cache" / "contexts").exists()  # nothing staged
    wrong = envkit("build", "cpu", "--builder", "kaniko", "--config", str(repo_root / "envkit.yaml"), env=env)
    assert wrong.returncode == 2 and "invalid choice: 'kaniko' (choose from 'docker', 'buildah')" in wrong.stderr


def test_the_builder_reaches_envkit_build_from_experiment(repo_root):
    from envkit.cli import build_parser
    from envkit.cli.options import build_options_argv

    args = build_parser().parse_args(["experiment", "--builder", "buildah", "--no-cache", "cpu-mnist"])
    assert build_options_argv(args) == ("--no-cache", "--builder", "buildah")
    assert build_options_argv(build_parser().parse_args(["experiment", "cpu-mnist"])) == ()


# ---------------------------------------------------------------- verify, with the builders faked

from envkit.image import verify as image_verify  # noqa: E402


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

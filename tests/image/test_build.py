"""envkit.image.build: BuildKit driven through a recording docker client, and its one-line failures."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from image_fakes import FakeClient, FakeImage, FakeImages, FakeTarget, envkit, staged
from paths import REPO_ROOT

from envkit.errors import EnvkitError
from envkit.image import archive as image_archive
from envkit.image import build as image_build
from envkit.image import build_context


def test_docker_client_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("DOCKER", "definitely-not-a-docker-client")
    with pytest.raises(EnvkitError, match="does not start with an executable"):
        image_build.docker_cli()
    monkeypatch.setenv("DOCKER", sys.executable)
    assert image_build.docker_cli() == [sys.executable]
    monkeypatch.setenv("DOCKER", f"{sys.executable} --host unix:///x.sock")  # several words, as run.sh allows
    assert image_build.docker_cli() == [sys.executable, "--host", "unix:///x.sock"]


def test_cli_without_an_engine_says_how_to_start_one(repo_root, tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no.sock"}
    done = envkit("build", "cpu", "--config", str(repo_root / "envkit.yaml"), env=env)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "no Docker engine answers" in done.stderr and "systemctl start docker" in done.stderr


@pytest.fixture
def recording_docker(tmp_path, monkeypatch):
    """A docker client that records its argv and environment (BuildKit, the index secret), then exits with $FAKE_RC."""
    log = tmp_path / "docker-calls.json"
    client = tmp_path / "fake-docker"
    client.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"with open({str(log)!r}, 'a') as out:\n"
        "    seen = {'argv': sys.argv[1:], 'buildkit': os.environ.get('DOCKER_BUILDKIT')}\n"
        "    out.write(json.dumps({**seen, 'secret': os.environ.get('ENVKIT_PIP_INDEX_URL')}) + '\\n')\n"
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
    monkeypatch.setattr(image_build, "source_date_epoch", lambda root, name, output: "1700000000")
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
    """The build passes ENVKIT_REVISION; the run wrapper on the host asks git itself: both give the full hash."""
    repo = REPO_ROOT
    built = build_context.git_revision(repo)
    env = {k: v for k, v in os.environ.items() if k != "ENVKIT_REVISION"}
    probe = "import provenance_facts; print(provenance_facts.git_state()[0])"  # as envkit_run.py: envkit not imported
    on_host = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=repo / "recipes",
        env={**env, "PYTHONPATH": str(repo / "envkit" / "support")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert re.fullmatch(r"[0-9a-f]{40}", built) and on_host.stdout.strip() == built


@pytest.mark.parametrize(
    ("target", "requested", "native", "flag"),
    [
        (FakeTarget(), None, "x86_64", None),  # the engine's own platform: no --platform, the tags it always had
        (FakeTarget(), None, "aarch64", None),  # a Mac's Docker Desktop builds the cpu image natively
        (FakeTarget(), "linux/arm64", "x86_64", "linux/arm64"),  # emulated, under a tag of its own
        (FakeTarget(), "linux/amd64", "x86_64", None),
    ],
)
def test_a_build_passes_platform_only_for_another_architecture(target, requested, native, flag):
    assert image_build.build_platform(target, requested, native) == flag


@pytest.mark.parametrize(
    ("target", "requested", "native", "line"),
    [
        (
            FakeTarget("cuda", "cuda", platforms=("linux/amd64",), torch="2.9.0"),
            None,
            "aarch64",
            "envkit build cuda: this engine builds linux/arm64 images, and PyPI's aarch64 torch 2.9.0 is the CPU "
            "build, so the image would train on the CPU: build it on an x86-64 engine (or --platform linux/amd64, "
            "emulated), or lock PyTorch's aarch64 CUDA build of torch for a target of its own",
        ),
        (
            FakeTarget("tpu-vm", "tpu-vm", platforms=("linux/amd64",)),
            "linux/arm64",
            "x86_64",
            "envkit build tpu-vm: --platform linux/arm64, and the target builds for linux/amd64 only "
            "(envkit.yaml platforms)",
        ),
        (
            FakeTarget("tpu-vm", "tpu-vm", platforms=("linux/amd64",)),
            None,
            "aarch64",
            "envkit build tpu-vm: this engine builds linux/arm64 images, and the target builds for linux/amd64 only "
            "(envkit.yaml platforms); pass --platform linux/amd64 to build it emulated",
        ),
        (
            FakeTarget(),
            "linux/s390x",
            "x86_64",
            "envkit build cpu: --platform linux/s390x, and the target builds for linux/amd64, linux/arm64 only "
            "(envkit.yaml platforms)",
        ),
    ],
)
def test_a_platform_the_target_does_not_list_is_one_line(target, requested, native, line):
    with pytest.raises(EnvkitError) as refused:
        image_build.build_platform(target, requested, native)
    assert (str(refused.value), refused.value.exit_code) == (line, 2)


def test_a_cuda_build_on_an_arm64_engine_is_refused_before_anything_is_staged(project, monkeypatch):
    client = FakeClient(FakeImage(id="", tags=[], labels={}), architecture="aarch64")
    monkeypatch.setattr(image_build, "connect_docker", lambda: client)
    target = FakeTarget("cuda", "cuda", platforms=("linux/amd64",), torch="2.9.0")
    with pytest.raises(EnvkitError, match="PyPI's aarch64 torch 2.9.0 is the CPU build"):
        image_build.build(project, target, build_context.BuildOptions())
    assert not build_context.staging_path(project, "cuda").exists()


@pytest.mark.parametrize("builder", ["docker", "buildah"])
def test_a_platform_the_target_does_not_list_is_refused_without_asking_an_engine(project, monkeypatch, builder):
    def no_engine():
        raise AssertionError("the engine was asked")

    monkeypatch.setattr(image_build, "connect_docker", no_engine)
    monkeypatch.setattr(image_build.buildah, "cli", no_engine)
    target = FakeTarget("cuda", "cuda", platforms=("linux/amd64",), torch="2.9.0")
    options = build_context.BuildOptions(builder=builder, platform="linux/arm64")
    with pytest.raises(EnvkitError, match="^envkit build cuda: --platform linux/arm64, and PyPI's aarch64 torch"):
        image_build.build(project, target, options)
    assert not build_context.staging_path(project, "cuda").exists()


def test_another_platform_is_another_content_tag(project, tmp_path):
    context = staged(project, tmp_path)
    native = build_context.context_digest(context, {})
    assert build_context.context_digest(context, {}, platform="linux/arm64") != native
    assert build_context.context_digest(context, {}, platform=None) == native


@pytest.mark.parametrize("given", ["build-arg", "environment"])
def test_an_index_password_reaches_docker_build_as_a_secret_never_an_arg(project, recording_docker, monkeypatch, given):
    """Before: `envkit build --build-arg PIP_INDEX_URL=https://u:pw@host/simple` passed the URL as a build arg, whose
    value `docker history` and the image's config keep. Now the ARG gets the URL without its user and password,
    and the URL itself reaches the pip steps as BuildKit's secret pip_index_url, read from the builder's
    environment, so it is on no command line either."""
    image = FakeImage(id="sha256:" + "ef" * 32, tags=[], labels={})
    client = FakeClient(image)
    client.images = BuildingImages(image)
    monkeypatch.setattr(image_build, "connect_docker", lambda: client)
    monkeypatch.setattr(image_build, "git_revision", lambda root: None)
    monkeypatch.setattr(image_build, "source_date_epoch", lambda root, name, output: None)
    client.images.built = True  # no image of this tag before the build: find_image says so
    monkeypatch.setattr(image_build, "find_image", lambda client, tag: None)
    url = "https://ci:Xk7pQ2vR9tok@pkgs.example.org/simple?token=Zz9"
    if given == "environment":  # as `envkit experiment` needs it: on no command line at all
        monkeypatch.setenv("ENVKIT_PIP_INDEX_URL", url)
    options = build_context.BuildOptions(build_args={"PIP_INDEX_URL": url} if given == "build-arg" else {})
    image_build.build(project, FakeTarget(), options)
    [call] = recording_docker()
    argv = call["argv"]
    assert not [word for word in argv if "Xk7pQ2vR9tok" in word or "Zz9" in word], argv
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"] == [
        "PIP_INDEX_URL=https://pkgs.example.org/simple"
    ]
    assert argv[argv.index("--secret") + 1] == "id=pip_index_url,env=ENVKIT_PIP_INDEX_URL"
    assert call["secret"] == url


def test_a_build_arg_holding_any_other_secret_is_one_line(project, recording_docker, monkeypatch):
    monkeypatch.setattr(image_build, "connect_docker", lambda: FakeClient(FakeImage(id="", tags=[], labels={})))
    token = "hf" + "_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
    with pytest.raises(EnvkitError) as caught:
        image_build.build(project, FakeTarget(), build_context.BuildOptions(build_args={"HF": token}))
    message = str(caught.value)
    assert message.startswith("--build-arg HF holds a Hugging Face token") and token not in message
    assert "\n" not in message and recording_docker() == []

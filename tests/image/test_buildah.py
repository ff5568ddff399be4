"""envkit.image.buildah, faked: its storage is a JSON file, so the same context builds without an engine."""

from __future__ import annotations

import os

from image_fakes import (
    DaemonImages,
    FakeClient,
    FakeImage,
    FakeTarget,
    buildah_project,
    envkit,
    staged,
)

from envkit.errors import EnvkitError
from envkit.image import build as image_build
from envkit.image import build_context


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
    assert wrong.returncode == 2 and "invalid choice: 'kaniko'" in wrong.stderr  # the choices' quoting is per Python


def test_the_builder_reaches_envkit_build_from_experiment(repo_root):
    from envkit.cli import build_parser
    from envkit.cli.options import build_options_argv

    args = build_parser().parse_args(["experiment", "--builder", "buildah", "--no-cache", "cpu-mnist"])
    assert build_options_argv(args) == ("--no-cache", "--builder", "buildah")
    assert build_options_argv(build_parser().parse_args(["experiment", "cpu-mnist"])) == ()


def test_an_index_password_reaches_buildah_as_a_secret_never_an_arg(project, fake_buildah, monkeypatch):
    """Before: --build-arg PIP_INDEX_URL=https://u:pw@host/simple went to `buildah bud --build-arg`, kept in the
    image's history; now bud gets the URL without them as the ARG, and the URL as the secret pip_index_url read
    from the environment variable it names."""
    monkeypatch.setattr(image_build, "connect_docker", lambda: None)
    monkeypatch.setattr(image_build, "engine_or_none", lambda: None)
    url = "https://ci:Xk7pQ2vR9tok@pkgs.example.org/simple"
    options = build_context.BuildOptions(builder="buildah", build_args={"PIP_INDEX_URL": url})
    image_build.build(buildah_project(project), FakeTarget(), options)
    [bud] = fake_buildah.calls("bud")
    assert not [word for word in bud if "Xk7pQ2vR9tok" in word], bud
    assert "PIP_INDEX_URL=https://pkgs.example.org/simple" in bud
    assert bud[bud.index("--secret") + 1] == "id=pip_index_url,src=ENVKIT_PIP_INDEX_URL,type=env"

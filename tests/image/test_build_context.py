"""envkit.image.build_context: staging, content tags, build arguments and bad input, without an engine.

The real engine builds the staged context in tests/integration/test_docker_engine.py.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess

import pytest
from image_fakes import FakeTarget, files, staged

from envkit.errors import EnvkitError
from envkit.image import build_context
from envkit.project.output import Output
from envkit.support import provenance

CERT = b"-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


def test_staged_context_has_the_design_layout_without_caches(project, tmp_path):
    context = staged(project, tmp_path)
    wrapper = sorted(provenance.shipped())  # envkit_run.py and its modules
    assert files(context) == sorted([".dockerignore", "Dockerfile", *wrapper, "project/recipes/mnist.py"])
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


def test_a_ca_certificate_file_that_also_holds_its_private_key_never_reaches_the_image(project, tmp_path):
    """Before: a PEM holding the CA's certificate and its private key (mitmproxy's mitmproxy-ca.pem, a proxy's
    combined bundle) was staged whole into certs/, so the key sat in every image envkit push publishes."""
    bundle = tmp_path / "mitmproxy-ca.pem"
    key = b"-----BEGIN " + b"RSA PRIVATE KEY-----\nMIIEfake\n-----END RSA PRIVATE KEY-----\n"
    bundle.write_bytes(key + CERT)
    for options, target in (
        (build_context.BuildOptions(ca_certs=(bundle,)), FakeTarget()),
        (build_context.BuildOptions(), FakeTarget(ca_certificates=(bundle,))),
    ):
        with pytest.raises(EnvkitError) as caught:
            staged(project, tmp_path, options, target, name=str(id(options)))
        assert str(caught.value).startswith(f"CA certificate {bundle} holds a private key")
        assert "\n" not in str(caught.value)
    assert not any(b"PRIVATE KEY" in path.read_bytes() for path in tmp_path.rglob("*.crt"))


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
    (context / "project" / "recipes" / "mnist.py").write_text("print('mnist')\n# edited\n")
    assert build_context.context_digest(context, {"ENVKIT_REVISION": "aaa"}) != base


def test_renaming_a_file_changes_the_tag(project, tmp_path):
    context = staged(project, tmp_path)
    before = build_context.context_digest(context, {})
    (context / "project" / "recipes" / "mnist.py").rename(context / "project" / "recipes" / "mnist2.py")
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
    assert build_context.source_date_epoch(project, "cpu", Output()) == "1700000000"
    context = staged(project, tmp_path)
    assert build_context.context_digest(context, {"SOURCE_DATE_EPOCH": "1"}) == build_context.context_digest(
        context, {}
    )


def test_source_date_epoch_outside_git_is_the_newest_rendered_file(project):
    os.utime(project / "docker" / "cpu" / "Dockerfile", (1600000000, 1600000000))
    os.utime(project / "docker" / "cpu" / ".dockerignore", (1500000000, 1500000000))
    for name in provenance.shipped():
        os.utime(project / "docker" / "cpu" / name, (1500000000, 1500000000))
    assert build_context.source_date_epoch(project, "cpu", Output()) == "1600000000"


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


# ---------------------------------------------------------------- save / load with an in-memory engine


# ---------------------------------------------------------------- through the CLI


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


def test_staging_keeps_the_most_recently_used_contexts_and_never_one_a_build_holds(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    kept = build_context.CONTEXTS_KEPT
    projects = [tmp_path / f"project{number}" for number in range(kept + 3)]
    for age, project in enumerate(projects):  # as earlier builds left them: project0 used last, the last one first
        context = build_context.staging_path(project, "cpu")
        context.mkdir(parents=True)
        (context / "wheel.whl").write_bytes(b"w")
        lock = context.parent / f".{context.name}.lock"
        lock.touch()
        os.utime(lock, ns=(10**18 - age * 10**12,) * 2)
    oldest = [build_context.staging_path(project, "cpu") for project in projects[-3:]]
    # a build of the oldest one holds its lock: it stays, whatever its age
    with open(oldest[-1].parent / f".{oldest[-1].name}.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with build_context.staging_area(tmp_path / "new", "cpu") as context:
            context.mkdir()
    left = {path.name for path in (tmp_path / "cache" / "contexts").iterdir() if not path.name.startswith(".")}
    locks = {path.name for path in (tmp_path / "cache" / "contexts").glob(".*.lock")}
    assert oldest[-1].name in left and f".{oldest[-1].name}.lock" in locks
    assert oldest[0].name not in left and f".{oldest[0].name}.lock" not in locks
    assert build_context.staging_path(projects[0], "cpu").name in left
    assert len(locks) == kept + 1  # the kept ones, the new one's and the held one's beyond the bound


# ---------------------------------------------------------------- build with a recording docker client


# ---------------------------------------------------------------- buildah, faked: its storage is a JSON file


# ---------------------------------------------------------------- verify, with the builders faked


def test_a_tracked_secret_never_enters_the_context_unless_the_config_lists_it(project, tmp_path, capsys):
    for name in (".env", "keys/id_rsa", ".aws/credentials"):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text("SECRET_API_KEY=1\n")
    subprocess.run(["git", "-C", str(project), "add", "-f", ".env", "keys", ".aws"], check=True)
    assert [name for name in files(staged(project, tmp_path)) if name.startswith("project/")] == [
        "project/recipes/mnist.py"
    ]
    assert "left out 3 file(s) that look like secrets" in capsys.readouterr().err
    listed = build_context.BuildOptions(include_secrets=(".env",))
    assert "project/.env" in files(staged(project, tmp_path, listed, name="listed"))


def test_the_staging_area_is_its_users_alone(project, tmp_path, monkeypatch):
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    old = os.umask(0o022)
    try:
        with build_context.staging_area(project, "cpu") as context:
            assert context.parent.stat().st_mode & 0o777 == 0o700
    finally:
        os.umask(old)

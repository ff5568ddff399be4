"""envkit.image.names: the registry forms push and launch accept, and the one line for the rest."""

from __future__ import annotations

import pytest
from image_fakes import FakeTarget, envkit

from envkit.errors import EnvkitError
from envkit.image import build as image_build
from envkit.image.names import check_registry


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

"""envkit.support.docker_client: the one Docker engine client, and the line a missing SDK gets."""

from __future__ import annotations

import sys

import pytest

from envkit.errors import EnvkitError
from envkit.support import docker_client as engine


def test_a_missing_docker_sdk_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "docker", None)  # what an install without the extra sees
    with pytest.raises(EnvkitError) as caught:
        engine.connect_docker()
    assert (
        str(caught.value)
        == "the Docker SDK for Python is missing: pip install 'envkit-hw[docker]' (or run 'make venv')"
    )
    assert caught.value.exit_code == 2


def test_the_rendered_docker_directory_is_not_mistaken_for_the_sdk(monkeypatch, tmp_path):
    # In a project root, `import docker` finds docker/ (the rendered files) as a namespace package.
    (tmp_path / "docker" / "cpu").mkdir(parents=True)
    pytest.importorskip("docker")  # so that the real SDK is put back in sys.modules afterwards
    monkeypatch.delitem(sys.modules, "docker")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    with pytest.raises(EnvkitError, match=r"pip install 'envkit-hw\[docker\]'"):
        engine.docker_sdk()

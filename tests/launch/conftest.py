"""Fixtures for the launch tests: a project holding the repository's envkit.yaml, and a PATH of fake clients."""

from __future__ import annotations

import pytest
from paths import REPO_ROOT


@pytest.fixture()
def project(tmp_path, monkeypatch):
    root = tmp_path / "project"
    root.mkdir()
    monkeypatch.chdir(root)
    (root / "envkit.yaml").write_text((REPO_ROOT / "envkit.yaml").read_text())
    return root


@pytest.fixture()
def fake_path(tmp_path, monkeypatch):
    # The fake clients alone: this machine has real sbatch, kubectl and gcloud in /usr/bin,
    # and none of them may run from a test.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir

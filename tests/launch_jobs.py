"""Jobs for the launch tests: fixed paths, so that renders are the same on every machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import REPO_ROOT

from envkit.cli import main
from envkit.image.build import repository
from envkit.image.pushed import Pushed, record
from envkit.launch.job import EngineOptions, build_job
from envkit.project.config import load_config
from envkit.project.experiments import experiment

ROOT = Path("/srv/envkit")
OUTPUT = Path("jobs")
# What envkit launch passes once the image was pushed (envkit push's record) or saved (envkit save's manifest).
DIGEST = "sha256:" + "0123456789abcdef" * 4
IMAGE_ID = "sha256:" + "fedcba9876543210" * 4


def make_job(
    name: str,
    engine: str,
    *,
    nodes: int = 2,
    image: str | None = None,
    root: Path = ROOT,
    data_dir: Path = Path("/shared/data"),
    results_dir: Path = Path("/shared/results"),
    **kwargs,
):
    exp = experiment(name)
    config = load_config(REPO_ROOT / "envkit.yaml")
    target = next(t for t in config.targets.values() if t.kind == exp.kind)
    options = kwargs.pop("options", EngineOptions())
    return build_job(
        exp,
        target,
        engine=engine,
        nodes=nodes,
        root=root,
        data_dir=data_dir,
        results_dir=results_dir,
        image=image or f"{repository(target.name)}:latest",
        options=options,
        **kwargs,
    )


def record_push(project: Path, target: str, registry: str, tag: str = "latest") -> Path:
    """The record `envkit push TARGET --registry REGISTRY` leaves in the project (docker/<target>/pushed.json)."""
    return record(project, target, [Pushed(f"{registry}/{repository(target)}", tag, DIGEST, IMAGE_ID)])


def save_manifest(directory: Path, target: str) -> Path:
    """A tarball path and the manifest `envkit save` writes beside it (the tarball itself is not needed to launch)."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"{repository(target)}-0123456789ab"
    manifest = {
        "manifest_version": 1,
        "tag": f"{repository(target)}:0123456789ab",
        "image_id": IMAGE_ID,
        "tarball": f"{stem}.tar.gz",
        "sha256": "ab" * 32,
        "size": 1,
        "pins": {},
    }
    (directory / f"{stem}.manifest.json").write_text(json.dumps(manifest))
    return directory / f"{stem}.tar.gz"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def project(tmp_path, monkeypatch):
    root = tmp_path / "project"
    root.mkdir()
    monkeypatch.chdir(root)
    (root / "envkit.yaml").write_text((REPO_ROOT / "envkit.yaml").read_text())
    return root

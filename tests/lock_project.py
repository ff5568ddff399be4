"""A project locked against package indexes the tests serve on 127.0.0.1 (tests/wheel_index.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from wheel_index import IndexServer

from envkit.cli import main

# Nothing answers on port 9 of the loopback: the base digest stays unresolved
# without the engine ever reaching a registry off this machine.
NO_REGISTRY = "127.0.0.1:9"


def seed_recipe_experiment(kind: str) -> dict:
    """envkit.yaml's experiments for a project that runs a seed recipe (MNIST) on targets of ``kind``: its locks
    hold the recipes' packages (tqdm), as this repository's do; a project without one locks its own packages alone."""
    entry = {"summary": "mnist", "title": "mnist", "kind": kind, "recipe": "mnist", "args": [], "gpus": "none"}
    return {f"{kind}-mnist": {**entry, "scale": "single", "published": None}}


@pytest.fixture()
def indexes(tmp_path, monkeypatch):
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    with IndexServer(tmp_path / "www") as server:
        pypi, pytorch = server.index("pypi"), server.index("pytorch")
        # The default index: PyPI's torch is the CUDA build, with nvidia-* and triton.
        pypi.add("torch", "2.9.0", "filelock>=3", "nvidia-cublas-cu12==12.8.4.1", "triton==3.5.0")
        pypi.add("nvidia-cublas-cu12", "12.8.4.1")
        pypi.add("triton", "3.5.0")
        pypi.add("torchvision", "0.24.0", "torch==2.9.0", "pillow")
        pypi.add("torch_xla", "2.9.0", 'libtpu==0.0.21; extra == "tpu"')
        pypi.add("libtpu", "0.0.21")
        pypi.add("tqdm", "4.67.1")
        pypi.add("filelock", "3.0")
        pypi.add("pillow", "12.0.0")
        # PyTorch's index: its own builds, plus mirrored third-party wheels that must not be taken.
        pytorch.add("torch", "2.9.0+cpu", "filelock>=3")
        pytorch.add("torchvision", "0.24.0+cpu", "torch==2.9.0", "pillow")
        pytorch.add("torch", "2.9.0+cu126", "filelock>=3", "nvidia-cublas-cu12")
        pytorch.add("torchvision", "0.24.0+cu126", "torch==2.9.0", "pillow")
        pytorch.add("filelock", "9.9")
        pytorch.add("pillow", "99.0")
        yield pypi, pytorch


def write_project(root: Path, pypi_url: str, **changes) -> Path:
    targets = {
        "cpu": {
            "kind": "cpu",
            "torch": "2.9.0",
            "python": "3.11",
            "base_image": f"{NO_REGISTRY}/python:3.11-slim-bookworm",
        },
        "cuda": {
            "kind": "cuda",
            "torch": "2.9.0",
            "cuda": "12.6",
            "base_image": f"{NO_REGISTRY}/nvidia/cuda:12.6.3-base-ubuntu24.04",
        },
        "tpu-vm": {
            "kind": "tpu-vm",
            "torch": "2.9.0",
            "python": "3.11",
            "base_image": f"{NO_REGISTRY}/python:3.11-slim-bookworm",
        },
    }
    for name, target in targets.items():
        target["pip_index_url"] = pypi_url
        target.update(changes.get(name, {}))
    config = root / "envkit.yaml"
    experiments = seed_recipe_experiment("cpu")
    config.write_text(yaml.safe_dump({"experiments": experiments, "targets": targets}, sort_keys=False))
    return config


def envkit(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def lock_text(config: Path, name: str) -> str:
    return (config.parent / "docker" / name / "requirements.lock").read_text()

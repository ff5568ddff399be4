"""The current lock of each target a report's runs name (envkit.runs.target_locks)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from envkit.runs.target_locks import current_locks


def _lock(folder: Path, text: str) -> str:
    folder.mkdir(parents=True)
    (folder / "requirements.lock").write_text(text)
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_locks_are_found_without_loading_the_whole_config(tmp_path):
    """Issue 41 §1: before, current_locks loaded and validated the whole config (matrix, experiments, every target
    built) only to find lock paths, and a config the matrix refuses (torch 2.0.1 on no row) hid every lock: each
    run was then told against its newest runs' lock instead of its target's."""
    (tmp_path / "envkit.yaml").write_text(
        "output: {images: images, notebooks: books}\n"
        "targets:\n"
        '  cpu: {kind: cpu, torch: "2.0.1"}\n'
        '  colab-t4: {platform: colab, accelerator: T4, torch: "2.9.0", python: "3.11"}\n'
        '  unlocked: {kind: cpu, torch: "2.9.0"}\n'
    )
    cpu = _lock(tmp_path / "images" / "cpu", "torch==2.0.1\n")
    notebook = _lock(tmp_path / "books" / "colab-t4", "torch==2.9.0\n")
    assert current_locks(tmp_path / "envkit.yaml", {"cpu", "colab-t4", "unlocked", "gone", None}) == {
        "cpu": cpu,
        "colab-t4": notebook,
        "unlocked": None,
    }


def test_a_config_that_is_not_envkits_gives_no_locks(tmp_path):
    (tmp_path / "envkit.yaml").write_text("targets: [cpu]\n")
    assert current_locks(tmp_path / "envkit.yaml", {"cpu"}) == {}
    assert current_locks(tmp_path / "absent.yaml", {"cpu"}) == {}

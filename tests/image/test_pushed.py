"""docker/<target>/pushed.json (envkit.image.pushed): the pushes a target's record holds."""

from __future__ import annotations

from envkit.image.pushed import Pushed, pushes, record

DIGEST = "sha256:" + "2" * 64
IMAGE_ID = "sha256:" + "1" * 64


def test_the_record_of_pushes_lists_every_one_by_repository_and_tag(tmp_path):
    """envkit reproduce looks a run's image up among them by its ID or digest."""
    folder = tmp_path / "docker" / "cpu"
    made = [Pushed("b/envkit-cpu", "x", DIGEST, IMAGE_ID), Pushed("a/envkit-cpu", "y", DIGEST, IMAGE_ID)]
    record(folder, "cpu", made)
    record(folder, "cpu", [Pushed("a/envkit-cpu", "a", DIGEST, IMAGE_ID)])
    assert [(pushed.repository, pushed.tag) for pushed in pushes(folder, "cpu")] == [
        ("a/envkit-cpu", "a"),
        ("a/envkit-cpu", "y"),
        ("b/envkit-cpu", "x"),
    ]
    assert pushes(tmp_path / "nowhere", "cpu") == []

"""buildah beside the Docker engine: two `--no-cache` builds of one locked configuration give one
image digest, and the image runs through the same run.sh in the Docker engine, named by digest.

The configuration is the locked offline cpu project (benchmarks/offline_lock.py) under its own
target name, so that its images never take the Docker engine's envkit-cpu:latest from the
other engine tests. Its base is the debootstrap'd one (scripts/base-image.sh), which buildah
copies out of the Docker engine: no registry is asked.

Cost (2 cores): two cold buildah builds of the 1.06 GB image, about a minute each, one move
into the Docker engine (about 25 s) and a five-step MNIST run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import offline_lock
import pytest
import yaml
from docker_engine import (
    MNIST_SMOKE,
    OFFLINE_CONFIG,
    engine_test,
    envkit,
    unavailable,
)

from envkit.image import buildah
from envkit.image.build_context import staging_path

TARGET = "buildah-cpu"
DIGEST = re.compile(r", digest (sha256:[0-9a-f]{64})\)$")


@pytest.fixture(scope="module")
def buildah_project(tmp_path_factory, locked) -> tuple[Path, Path]:
    """The locked offline project with its target renamed, relocked (uv's cache answers) and rendered."""
    if not buildah.available():
        unavailable("buildah is not installed (apt-get install buildah)")
    _, wheels = locked
    root = tmp_path_factory.mktemp("buildah")
    config = yaml.safe_load(OFFLINE_CONFIG.read_text())
    config["targets"] = {TARGET: config["targets"]["cpu"]}
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    try:
        project = offline_lock.new_project(root / "project", root / "config.yaml")
        offline_lock.lock_and_render(project, offline_lock.torch_index(root / "torch-index"), TARGET)
    except offline_lock.OfflineLockError as exc:
        unavailable(f"cannot lock the offline project as {TARGET}: {exc}")
    yield project, wheels
    shutil.rmtree(staging_path(project, TARGET), ignore_errors=True)


def build_flags(base_image: str, wheels: Path) -> list[str]:
    # A fixed SOURCE_DATE_EPOCH (the project is no git checkout: it would be the files' mtime,
    # new every session), so that the layers buildah keeps as its cache are the next session's.
    return [
        "--config",
        "envkit.yaml",
        "--base-image",
        base_image,
        "--wheelhouse",
        str(wheels),
        "--build-arg",
        "SOURCE_DATE_EPOCH=1700000000",
    ]


@engine_test
def test_two_no_cache_buildah_builds_give_one_digest_and_run_sh_runs_it_by_that_digest(
    client, base_image, buildah_project, docker_cli, tmp_path
):
    project, wheels = buildah_project
    first = envkit("build", TARGET, *build_flags(base_image, wheels), "--builder", "buildah", "--no-cache", cwd=project)
    tag, digest = first.stdout.strip(), DIGEST.search(first.stderr.strip().splitlines()[-1]).group(1)
    # The second --no-cache build is verify's: it compares the two manifest digests.
    second = envkit("verify", TARGET, *build_flags(base_image, wheels), cwd=project)
    lines = second.stdout.splitlines()
    print(f"buildah digests: {digest} (build), {lines[-2].split()[-1]} (verify's --no-cache rebuild)")
    assert lines[-2:] == [f"identical: {digest}", "reproduced"], second.stdout

    # In the Docker engine under both tags, by buildah's image ID; buildah keeps it by digest.
    stored = buildah.find(tag)
    image = client.images.get(tag)
    assert image.id == stored.image_id and f"envkit-{TARGET}:latest" in image.tags and stored.digest == digest
    assert buildah.VERSION_LABEL in image.labels

    # The committed run.sh runs it; the container is given the image's digest beside its ID.
    seen = tmp_path / "run-env"
    recording = tmp_path / "docker"
    recording.write_text(
        f'#!/bin/sh\n[ "$1" = run ] && printf "%s\\n" "$ENVKIT_IMAGE_DIGEST" > {seen}\nexec {docker_cli} "$@"\n'
    )
    recording.chmod(0o755)
    results = tmp_path / "results"
    run = subprocess.run(
        [
            str(project / "docker" / TARGET / "run.sh"),
            *MNIST_SMOKE,
        ],
        env={
            **os.environ,
            "DOCKER": str(recording),
            "RESULTS_DIR": str(results),
            "DATA_DIR": str(tmp_path / "data"),
            "HOME": str(tmp_path),
        },
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert seen.read_text() == f"{digest}\n"
    [document] = [json.loads(path.read_text()) for path in results.glob("mnist-*.json")]
    assert document["environment"]["image_id"] == stored.image_id
    assert document["environment"]["image_digest"] == digest
    assert document["environment"]["image"] == f"envkit-{TARGET}:latest"
    client.images.remove(image.id, force=True)
    for name in (tag, f"envkit-{TARGET}:latest"):
        buildah.untag(name)

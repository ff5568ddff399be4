"""`envkit reproduce` with a real Docker engine and registry (issue 43): a first user runs an experiment in the
pushed image and writes the page; a second user, in another clone with another HOME and without the image,
reproduces it from the page alone: the image is pulled by its digest, the run repeats, the verdict says so. And
where no push is known, a rebuild from the lock at the revision whose Python packages are not the record's: the
verdict names the package.

The project is the locked offline cpu project (benchmarks/offline_lock.py), a git repository here, built from its
wheelhouse; the run is five MNIST steps on generated data, seeded, so its accuracy repeats exactly.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from docker_engine import MNIST_SMOKE, engine_test, envkit, locked_build


def git(*args: str, cwd) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "first", "GIT_AUTHOR_EMAIL": "first@example.invalid"}
    env.update(GIT_COMMITTER_NAME="first", GIT_COMMITTER_EMAIL="first@example.invalid")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def first_user(tmp_path, locked, base_image, registry: str | None) -> tuple[Path, str, str]:
    """The first user's project (a git repository), its cpu image (pushed to ``registry`` where given: then run by
    its digest) and one run in it as `envkit experiment` runs it (run.sh): the project, the image ID, the image run."""
    locked_root, wheels = locked
    first = tmp_path / "first"
    shutil.copytree(locked_root, first, ignore=shutil.ignore_patterns("results", "__pycache__"))
    (first / ".gitignore").write_text("results/\n")
    # A file of its own among what the image holds: an image of the same inputs built before (the locked project's,
    # at no revision: it is no git repository; or this test's in an earlier run, at a commit no longer there) would
    # be reused under the same content tag, and its runs would record a revision this clone cannot check out.
    (first / "recipes" / "first_user.txt").write_text(f"{uuid.uuid4()}\n")
    git("init", "-q", cwd=first)
    git("add", "-A", cwd=first)
    git("commit", "-q", "-m", "the project", cwd=first)
    built = locked_build(first, wheels, base_image).stdout.strip()
    image = built
    if registry is not None:
        pushed = envkit("push", "cpu", "--config", "envkit.yaml", "--registry", f"{registry}/team", cwd=first)
        image = pushed.stdout.split()[-1]
        assert "@sha256:" in image
    env = {**os.environ, "IMAGE": image, "ENVKIT_EXPERIMENT": "cpu-mnist"}
    subprocess.run(["docker/cpu/run.sh", *MNIST_SMOKE], cwd=first, env=env, check=True, capture_output=True)
    return first, built, image


def second_user(first: Path, tmp_path, client, built: str) -> tuple[Path, dict]:
    """Another clone in another folder, another HOME, and no copy of the first user's image in the engine: the
    clone and the environment its commands run with."""
    second = tmp_path / "second"
    subprocess.run(["git", "clone", "-q", str(first), str(second)], check=True)
    client.images.remove(client.images.get(built).id, force=True)
    home = tmp_path / "home"
    home.mkdir()
    return second, {**os.environ, "HOME": str(home)}


def reproduce(second: Path, env: dict, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "envkit", "reproduce", *argv, "--config", "envkit.yaml"],
        cwd=second,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )


@engine_test
def test_a_second_user_reproduces_a_pushed_image_run_from_the_page_alone(
    client, base_image, locked, registry, tmp_path
):
    first, built, by_digest = first_user(tmp_path, locked, base_image, registry)
    [record] = (first / "results").glob("*.json")
    assert json.loads(record.read_text())["environment"]["image_digest"] == by_digest.split("@")[1]
    envkit("report", "results", "--html", str(tmp_path / "page.html"), "--config", "envkit.yaml", cwd=first)

    second, env = second_user(first, tmp_path, client, built)
    done = reproduce(second, env, str(tmp_path / "page.html"))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert f"the recorded image by digest: {by_digest}" in done.stdout + done.stderr
    assert "reproduced" in done.stdout and "differs" not in done.stdout
    assert client.images.get(by_digest).id  # pulled again by its digest
    [again] = (second / "results" / "reproduce-page").glob("*.json")
    assert json.loads(again.read_text())["environment"]["image_digest"] == by_digest.split("@")[1]


@engine_test
def test_a_rebuild_whose_packages_are_not_the_records_differs_naming_the_package(client, base_image, locked, tmp_path):
    """No push of the image is known, so the second user rebuilds it from the lock at the revision (offline: the
    wheelhouse and base image as envkit build takes them). The lock is the record's (a lock of another sha256 is
    refused before anything runs), so what the record lists is changed instead: one package at another version,
    as an image that was not what its lock says would list it. The rebuild installs the lock's; the verdict differs,
    naming that package, and the exit status is 1."""
    first, built, _ = first_user(tmp_path, locked, base_image, registry=None)
    [record] = (first / "results").glob("*.json")
    shared = json.loads(record.read_text())
    distributions = shared["environment"]["distributions"]
    index, locked_version = next(
        (i, d.partition("==")[2]) for i, d in enumerate(distributions) if d.startswith("tqdm==")
    )
    distributions[index] = "tqdm==4.0.0"  # a version no lock of today's names
    (tmp_path / "shared.json").write_text(json.dumps(shared, indent=2) + "\n")

    second, env = second_user(first, tmp_path, client, built)
    _, wheels = locked
    done = reproduce(
        second, env, str(tmp_path / "shared.json"), "--wheelhouse", str(wheels), "--base-image", base_image
    )
    said = done.stdout + done.stderr
    assert done.returncode == 1, said[-3000:]
    assert "a rebuild of cpu from its lock" in said
    assert f"differences from the record: python packages: tqdm: 4.0.0 -> {locked_version}" in said  # its proof
    assert re.search(
        rf"^## .*: differs: environment: python packages: tqdm: 4.0.0 -> {locked_version}", done.stdout, re.M
    )
    [again] = (second / "results" / "reproduce-shared").glob("*.json")
    assert json.loads(again.read_text())["run"]["exit_status"] == 0  # the run itself went well: its environment differs

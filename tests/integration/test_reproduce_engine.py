"""`envkit reproduce` with a real Docker engine and registry (issue 43): a first user runs an experiment in the
pushed image and writes the page; a second user, in another clone with another HOME and without the image,
reproduces it from the page alone: the image is pulled by its digest, the run repeats, the verdict says so.

The project is the locked offline cpu project (benchmarks/offline_lock.py), a git repository here, built from its
wheelhouse; the run is five MNIST steps on generated data, seeded, so its accuracy repeats exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

from docker_engine import MNIST_SMOKE, engine_test, envkit, locked_build


def git(*args: str, cwd) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "first", "GIT_AUTHOR_EMAIL": "first@example.invalid"}
    env.update(GIT_COMMITTER_NAME="first", GIT_COMMITTER_EMAIL="first@example.invalid")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@engine_test
def test_a_second_user_reproduces_a_pushed_image_run_from_the_page_alone(
    client, base_image, locked, registry, tmp_path
):
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
    pushed = envkit("push", "cpu", "--config", "envkit.yaml", "--registry", f"{registry}/team", cwd=first)
    by_digest = pushed.stdout.split()[-1]
    assert "@sha256:" in by_digest
    # The first user's run, in the pushed image by its digest, as `envkit experiment` runs it (run.sh).
    env = {**os.environ, "IMAGE": by_digest, "ENVKIT_EXPERIMENT": "cpu-mnist"}
    subprocess.run(["docker/cpu/run.sh", *MNIST_SMOKE], cwd=first, env=env, check=True, capture_output=True)
    [record] = (first / "results").glob("*.json")
    assert json.loads(record.read_text())["environment"]["image_digest"] == by_digest.split("@")[1]
    envkit("report", "results", "--html", str(tmp_path / "page.html"), "--config", "envkit.yaml", cwd=first)

    # The second user: another clone, another HOME, and no copy of the image in the engine.
    second = tmp_path / "second"
    subprocess.run(["git", "clone", "-q", str(first), str(second)], check=True)
    client.images.remove(client.images.get(built).id, force=True)
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "envkit", "reproduce", str(tmp_path / "page.html"), "--config", "envkit.yaml"],
        cwd=second,
        env={**os.environ, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert f"the recorded image by digest: {by_digest}" in done.stdout + done.stderr
    assert "reproduced" in done.stdout and "differs" not in done.stdout
    assert client.images.get(by_digest).id  # pulled again by its digest
    [again] = (second / "results" / "reproduce-page").glob("*.json")
    assert json.loads(again.read_text())["environment"]["image_digest"] == by_digest.split("@")[1]

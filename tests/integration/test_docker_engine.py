"""End to end against a real Docker engine: base image, build, run, results, save/load, CA,
push, prune, verify and diff (the scripts CI uses to start the engine: tests/integration/test_scripts.py).

Needs a running engine (CI starts one with scripts/docker-engine.sh) and root or a
cached base image for scripts/base-image.sh. Skips with the reason when either is
missing, and fails instead when ENVKIT_REQUIRE_DOCKER=1.

The cpu target (benchmarks/envkit-offline.yaml) pins torch without torchvision and
installs only from a wheelhouse: `pip download` on the host fills it (the torch wheel
comes from ENVKIT_TEST_WHEELS, default /opt/wheels, or the host's pip configuration).
The locked tests build the offline config from a lock (benchmarks/offline_lock.py).

Every locked target of envkit.yaml is built from its committed docker/<target>/ files,
unmodified, on the debootstrap'd Debian 12 base, whose Python (3.11) is the targets' own,
pip fetching the locked files inside the build; each image is built once per session
and runs its MNIST recipe through its run.sh with only the hardware flags swapped (no
GPU, no TPU here). Cost on 2 cores: tpu-vm 8.1 GB, cuda 7.6 GB, each a few minutes.
"""

from __future__ import annotations

import grp
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import offline_lock
import pytest
import yaml
from docker_engine import (
    HOST_CA_BUNDLE,
    MNIST_SMOKE,
    OFFLINE_CONFIG,
    build_committed,
    engine_test,
    envkit,
    locked_build,
    manifest_digest,
    unavailable,
)
from mnist_files import read_results, write_mnist
from offline_lock import OfflineLockError, lock_and_render, torch_index
from paths import REPO_ROOT
from results_contract import assert_valid_results

import docker
from envkit.host.doctor import inspect_host
from envkit.image.build_context import staging_path
from envkit.lock.lockfile import normalise, read_lock
from envkit.project.load import load_config
from envkit.render.labels import LOCK_LABEL

TORCH = yaml.safe_load(OFFLINE_CONFIG.read_text())["targets"]["cpu"]["torch"]
SMALL_PYPI_PACKAGE = "six==1.17.0"
NON_ROOT = (4242, 4242)


@pytest.fixture(scope="session")
def wheelhouse(locked) -> Path:
    """The locked project's wheelhouse: pip resolves the unlocked offline config to the same eleven files (torch's
    CPU build and its dependencies), so the session downloads them once."""
    return locked[1]


@pytest.fixture(scope="session")
def build_flags(base_image, wheelhouse) -> list[str]:
    return ["--config", "envkit.yaml", "--base-image", base_image, "--wheelhouse", str(wheelhouse)]


@pytest.fixture(scope="session")
def built(project, build_flags) -> str:
    return envkit("build", "cpu", *build_flags, cwd=project).stdout.strip()


@engine_test
def test_build_tags_the_image_by_its_content(client, project, build_flags, built):
    assert re.fullmatch(r"envkit-cpu:[0-9a-f]{12}", built)
    image = client.images.get(built)
    assert "envkit-cpu:latest" in image.tags
    assert image.labels["io.envkit.pin.torch"] == TORCH
    again = envkit("build", "cpu", *build_flags, cwd=project)
    assert again.stdout.strip() == built  # identical inputs, identical tag
    assert "already built" in again.stderr


def as_user(user: tuple[int, int], groups: tuple[int, ...] = ()) -> list[str]:
    """Command prefix that runs the rest as ``user`` (we are root) with only ``groups``."""
    supplementary = f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups"
    return ["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", supplementary]


def run_mnist(
    run_sh: Path, docker_cli: str, results: Path, user: tuple[int, int] | None = None
) -> subprocess.CompletedProcess:
    command = [str(run_sh), *MNIST_SMOKE]
    env = {
        **os.environ,
        "DOCKER": docker_cli,
        "RESULTS_DIR": str(results),
        "DATA_DIR": str(results / "data"),
        "HOME": str(results.parent),
    }
    if user is not None:
        # A real non-root caller: run.sh passes --user <uid>:<gid> and the files must follow.
        command = [*as_user(user, groups=(grp.getgrnam("docker").gr_gid,)), *command]
    return subprocess.run(command, cwd=results.parent, env=env, capture_output=True, text=True)


def check_results(results: Path, owner: tuple[int, int], image: str) -> None:
    files = sorted(results.glob("mnist-*.json"))
    assert len(files) == 1, f"expected one results file in {results}, found {files}"
    document = json.loads(files[0].read_text())
    assert document["recipe"] == "mnist"
    assert document["environment"]["torch"].startswith(TORCH)
    assert document["environment"]["image"] == image
    assert (files[0].stat().st_uid, files[0].stat().st_gid) == owner
    # run.sh started it through the run wrapper, which added its run block to the recipe's record
    run = document["run"]
    assert run["exit_status"] == 0 and run["argv"][:2] == ["python", "recipes/mnist.py"]
    assert sorted(path.name for path in results.iterdir() if path.suffix == ".json") == [files[0].name]


@engine_test
def test_mnist_results_land_on_the_host_owned_by_the_caller(project, docker_cli, built, tmp_path):
    results = tmp_path / "results"
    done = run_mnist(project / "docker" / "cpu" / "run.sh", docker_cli, results)
    assert done.returncode == 0, done.stderr[-4000:]
    check_results(results, (os.getuid(), os.getgid()), "envkit-cpu:latest")


@pytest.fixture
def caller_home():
    """A directory the caller owns and can reach: NON_ROOT's when we are root (pytest's
    own tmp dirs are 0700 root)."""
    home = Path(tempfile.mkdtemp(prefix="envkit-caller-"))
    if os.geteuid() == 0:
        os.chown(home, *NON_ROOT)
    yield home
    shutil.rmtree(home)


@engine_test
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to act as another user"
)
def test_mnist_results_belong_to_a_non_root_caller(project, docker_cli, built, caller_home):
    try:
        grp.getgrnam("docker")
    except KeyError:
        pytest.skip("no 'docker' group to give the non-root caller access to the engine")
    run_sh = caller_home / "run.sh"
    shutil.copy(project / "docker" / "cpu" / "run.sh", run_sh)  # the caller must be able to read it
    done = run_mnist(run_sh, docker_cli, caller_home / "results", user=NON_ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    check_results(caller_home / "results", NON_ROOT, "envkit-cpu:latest")


@engine_test
def test_envkit_run_goes_through_run_sh(project, docker_cli, built, tmp_path):
    results = tmp_path / "results"
    env = {**os.environ, "DOCKER": docker_cli}
    envkit(
        "run",
        "--config",
        "envkit.yaml",
        "--results-dir",
        str(results),
        "--data-dir",
        str(tmp_path / "data"),
        "cpu",
        "mnist",
        "--",
        "--dataset",
        "fake",
        "--max-steps",
        "5",
        "--quiet",
        cwd=project,
        env=env,
    )
    check_results(results, (os.getuid(), os.getgid()), "envkit-cpu:latest")


@engine_test
def test_a_checkpoint_saved_in_the_image_s_project_folder_reaches_the_host_s_run_folder(
    project, docker_cli, built, tmp_path
):
    """Issue 32 §8: the project folder in the image is the container's, and vanishes with it; the run wrapper copies
    what the run saved there into the run's folder under the mounted results, and the record lists it."""
    results = tmp_path / "results"
    save = "import torch; torch.save({'weights': torch.ones(3)}, 'snapshot.pt')"
    env = {**os.environ, "DOCKER": docker_cli, "RESULTS_DIR": str(results), "DATA_DIR": str(tmp_path / "data")}
    env["IMAGE"] = built  # this session's build by its content tag: another session may move envkit-cpu:latest
    done = subprocess.run(
        [str(project / "docker" / "cpu" / "run.sh"), "python", "-c", save],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (record,) = [assert_valid_results(path) for path in results.glob("*.json")]
    kept = record["run"]["project_files"]
    assert kept["project"] == "/workspace/project" and kept["left_out"] == []
    (entry,) = kept["copied"]
    copy = results / entry["copy"]
    assert entry["path"] == "snapshot.pt" and copy == results / record["run_name"] / "files" / "snapshot.pt"
    data = copy.read_bytes()
    assert data[:2] == b"PK" and (len(data), hashlib.sha256(data).hexdigest()) == (entry["size"], entry["sha256"])
    assert (copy.stat().st_uid, copy.stat().st_gid) == (os.getuid(), os.getgid())


@engine_test
def test_docker_kill_leaves_the_runs_log_and_a_record_the_report_counts(project, docker_cli, built, tmp_path):
    """Issue 39 §7: while a program printed a line a second, `docker kill` of its container left a 0-byte
    stdout.log and no record, and `envkit report` said "no results"; now the log holds what it printed, the record
    of its start stays, and the report counts the run (from the host it cannot tell killed from running)."""
    results, token = tmp_path / "results", f"envkit-kill-{os.getpid()}"
    program = f"import time\nfor i in range(600):\n    print({token!r}, i)\n    time.sleep(0.2)\n"
    env = {**os.environ, "DOCKER": docker_cli, "RESULTS_DIR": str(results), "DATA_DIR": str(tmp_path / "data")}
    started = subprocess.Popen(
        [str(project / "docker" / "cpu" / "run.sh"), "python", "-c", program],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not any(token in log.read_text() for log in results.glob("*/stdout.log")):
            assert time.monotonic() < deadline and started.poll() is None, started.stderr and started.stderr.read()
            time.sleep(0.5)
        listed = subprocess.run([docker_cli, "ps", "-q", "--no-trunc"], capture_output=True, text=True, check=True)
        (container,) = [
            name
            for name in listed.stdout.split()
            if token in subprocess.run([docker_cli, "inspect", name], capture_output=True, text=True).stdout
        ]
        subprocess.run([docker_cli, "kill", container], check=True, capture_output=True)
        started.wait(timeout=60)
    finally:
        if started.poll() is None:
            started.kill()
    (path,) = results.glob("*.json")
    record = json.loads(path.read_text())
    assert record["run"]["status"] == "running" and record["run"]["exit_status"] is None
    (log,) = results.glob("*/stdout.log")
    assert f"{token} 0" in log.read_text()
    report = envkit("report", str(results), cwd=project)
    assert "| 1 | 1 |" in report.stdout and "running or lost" in report.stderr, report.stdout + report.stderr


@engine_test
def test_an_index_password_given_as_a_build_arg_stays_out_of_the_image_and_its_history(
    client, project, build_flags, built, docker_cli
):
    """Issue 39 §4: `envkit build --build-arg PIP_INDEX_URL=https://u:pw@host/simple` left the password in
    `docker history` and the image's config, which `envkit push` publishes; now pip gets the URL as a build secret
    and the ARG the URL without its credentials."""
    password = f"s3cret{os.getpid()}"
    url = f"https://ci:{password}@index.invalid/simple"
    try:
        done = envkit("build", "cpu", *build_flags, "--build-arg", f"PIP_INDEX_URL={url}", cwd=project)
        tag = done.stdout.strip()
        history = subprocess.run(
            [docker_cli, "history", "--no-trunc", tag], capture_output=True, text=True, check=True
        ).stdout
        assert "https://index.invalid/simple" in history  # the ARG, without what it must not keep
        assert password not in history and password not in json.dumps(client.images.get(tag).attrs)
        assert password not in done.stdout + done.stderr
    finally:
        client.images.get(built).tag("envkit-cpu", "latest")  # the session's image stays the one later tests run


@engine_test
@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
def test_make_cpu_mnist_checks_builds_and_runs(project, repo_root, base_image, wheelhouse, docker_cli, built, tmp_path):
    for name in ("Makefile", "requirements/dev.lock", "pyproject.toml"):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(repo_root / name, project / name)
        os.utime(project / name, (0, 0))  # older than the venv: make must not reinstall it
    venv = Path(sys.executable).parent.parent
    results = tmp_path / "results"
    done = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-C",
            str(project),
            "cpu-mnist",
            f"VENV={venv}",
            f"BASE_IMAGE={base_image}",
            f"WHEELHOUSE={wheelhouse}",
            "DATASET=fake",
            "MAX_STEPS=5",
            f"RESULTS_DIR={results}",
            f"DATA_DIR={tmp_path / 'data'}",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER": docker_cli},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    # The rendered files were fresh: a copy has no render stamp, so make renders by content, and nothing changes.
    assert re.findall(r"\((\d+) changed\)", done.stdout) in ([], ["0"])
    assert f"{built} is already built" in done.stderr
    check_results(results, (os.getuid(), os.getgid()), "envkit-cpu:latest")


@engine_test
def test_gpu_target_is_refused_before_building(client, repo_root, tmp_path):
    if inspect_host().gpus:
        pytest.skip("this host has a GPU")
    before = {image.id for image in client.images.list()}
    done = envkit("run", "--config", str(repo_root / "envkit.yaml"), "cuda", "mnist", cwd=tmp_path, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("envkit: error: this host cannot run cuda images: no NVIDIA GPU")
    assert done.stderr.count("\n") == 1
    assert {image.id for image in client.images.list()} == before


@engine_test
def test_extra_ca_certificate_is_trusted_by_pip_in_the_image(client, project, build_flags, built, docker_cli):
    """HTTPS from containers here goes through a re-signing proxy whose CA is in the host bundle."""
    if not HOST_CA_BUNDLE.is_file():
        pytest.skip(f"no host CA bundle at {HOST_CA_BUNDLE}")
    fetch = ["pip", "download", "--retries", "0", "--timeout", "20", "--no-deps", "-d", "/tmp/dl", SMALL_PYPI_PACKAGE]
    without_ca = subprocess.run(
        [*shlex.split(docker_cli), "run", "--rm", built, *fetch], capture_output=True, text=True
    )
    if without_ca.returncode == 0:
        pytest.skip("HTTPS from containers works without an extra CA on this host: nothing to prove")
    if "CERTIFICATE_VERIFY_FAILED" not in without_ca.stdout + without_ca.stderr:
        pytest.skip(f"PyPI is not reachable from containers here: {without_ca.stderr.strip().splitlines()[-1:]}")
    with_ca = envkit("build", "cpu", *build_flags, "--ca-cert", str(HOST_CA_BUNDLE), cwd=project).stdout.strip()
    assert with_ca != built  # the certificate is part of the content, so of the tag
    done = subprocess.run([*shlex.split(docker_cli), "run", "--rm", with_ca, *fetch], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    # leave latest where the other tests expect it
    assert envkit("build", "cpu", *build_flags, cwd=project).stdout.strip() == built
    client.images.remove(with_ca)


@pytest.fixture(scope="module")
def saved(project, built, tmp_path_factory) -> Iterator[tuple[Path, Path]]:
    """``envkit save cpu`` of the built image: its tarball (~400 MB) and manifest, which the save-and-load test and
    the diff test both read, so the module saves the image once for both."""
    folder = tmp_path_factory.mktemp("saved")
    tarball, manifest = envkit(
        "save", "cpu", "--config", "envkit.yaml", "--output-dir", str(folder), cwd=project
    ).stdout.split()
    yield Path(tarball), Path(manifest)
    shutil.rmtree(folder, ignore_errors=True)  # gone with the module: pytest keeps its last temporary folders


@engine_test
def test_save_then_load_restores_the_same_image(client, project, built, saved, tmp_path):
    tarball, manifest_path = saved
    manifest = json.loads(manifest_path.read_text())
    image = client.images.get(built)
    assert manifest["tag"] == built and manifest["image_id"] == image.id
    assert manifest["pins"] == {"python": "3.11", "torch": TORCH}
    assert manifest["size"] == tarball.stat().st_size

    client.images.remove(image.id, force=True)
    loaded = envkit("load", str(tarball), cwd=project)
    assert loaded.stdout.strip() == built
    assert client.images.get("envkit-cpu:latest").id == image.id

    # same image, same bytes: saving the loaded image again reproduces the tarball
    again = envkit(
        "save", "cpu", "--config", "envkit.yaml", "--output-dir", str(tmp_path / "again"), cwd=project
    ).stdout.split()
    assert json.loads(Path(again[1]).read_text())["sha256"] == manifest["sha256"]

    # One flipped byte in the middle of a layer of the second save (the session's is the diff test's too).
    flipped = Path(again[0])
    with flipped.open("r+b") as stream:
        stream.seek(flipped.stat().st_size // 2)
        byte = stream.read(1)
        stream.seek(-1, os.SEEK_CUR)
        stream.write(bytes([byte[0] ^ 0xFF]))
    refused = envkit("load", str(flipped), cwd=project, check=False)
    assert refused.returncode == 2
    assert "refusing to load" in refused.stderr and refused.stderr.count("\n") == 1
    flipped.unlink()  # ~400 MB; pytest keeps tmp dirs around


@engine_test
def test_push_sends_both_tags_to_the_registry_and_records_its_digest(client, project, built, registry):
    done = envkit("push", "cpu", "--config", "envkit.yaml", "--registry", f"{registry}/team", cwd=project)
    tag = built.split(":")[1]
    *tags, by_digest = done.stdout.split()
    assert tags == [f"{registry}/team/envkit-cpu:{tag}", f"{registry}/team/envkit-cpu:latest"]
    listing = json.load(urllib.request.urlopen(f"http://{registry}/v2/team/envkit-cpu/tags/list", timeout=10))
    assert sorted(listing["tags"]) == sorted([tag, "latest"])
    # The digest recorded is the registry's own for both tags, and the ID the engine's.
    recorded = json.loads((project / "docker" / "cpu" / "pushed.json").read_text())["images"][
        f"{registry}/team/envkit-cpu"
    ]
    assert recorded[tag]["digest"] == recorded["latest"]["digest"] == manifest_digest(registry, "team/envkit-cpu", tag)
    assert by_digest == f"{registry}/team/envkit-cpu@{recorded[tag]['digest']}"
    assert recorded[tag]["image_id"] == client.images.get(built).id
    for reference in tags:
        client.images.remove(reference)


@engine_test
def test_push_to_an_unreachable_registry_is_one_line(client, project, built):
    done = envkit("push", "cpu", "--config", "envkit.yaml", "--registry", "localhost:1", cwd=project, check=False)
    assert done.returncode == 1
    # progress lines come first; the verdict is the last line
    assert done.stderr.splitlines()[-1].startswith(f"envkit: error: push of localhost:1/{built} failed: ")
    assert "Traceback" not in done.stderr
    client.images.remove(f"localhost:1/{built}")


@engine_test
def test_prune_removes_older_builds_keeps_latest_and_what_a_container_uses(client, project, built, base_image):
    def older_build(tag: str) -> str:
        # A one-label image on the base: an earlier build of the target, as far as the engine can tell.
        dockerfile = f"FROM {base_image}\nLABEL io.envkit.target=cpu io.envkit.test={tag}\n".encode()
        image, _ = client.images.build(fileobj=io.BytesIO(dockerfile), tag=f"envkit-cpu:{tag}", rm=True)
        return image.id

    unused, used = older_build("000000000001"), older_build("000000000002")
    container = client.containers.create(used, command=["true"])
    try:
        # An engine that served earlier runs holds their builds too: prune takes those as well.
        planned = envkit("prune", "cpu", "--config", "envkit.yaml", "--dry-run", cwd=project)
        listed = {line.split(" (")[0] for line in planned.stdout.splitlines()}
        assert {"would remove envkit-cpu:000000000001", "would remove envkit-cpu:000000000002"} <= listed
        assert not any(built in line for line in listed)
        assert client.images.get(unused) and client.images.get(used)

        done = envkit("prune", "cpu", "--config", "envkit.yaml", cwd=project)
        removed = [line.split(" (")[0] for line in done.stdout.splitlines()]
        assert "removed envkit-cpu:000000000001" in removed and "removed envkit-cpu:000000000002" not in removed
        assert "envkit: warning: kept envkit-cpu:000000000002: " in done.stderr
        assert client.images.get("envkit-cpu:000000000002").id == used
    finally:
        container.remove()
    envkit("prune", "cpu", "--config", "envkit.yaml", cwd=project)
    for gone in (unused, used):
        with pytest.raises(docker.errors.ImageNotFound):
            client.images.get(gone)
    # the build every other test runs is untouched, content tag and all
    assert sorted(client.images.get(built).tags) == sorted([built, "envkit-cpu:latest"])
    assert client.images.get(base_image)


# ---------------------------------------------------------------- the committed targets, built as committed

# Each locked target's run on this host (no GPU, no TPU): the recipe arguments, run.sh's settings,
# and the words of its docker command that ask for hardware, with what stands in for them (None:
# dropped). The rest of the command is the committed run.sh's own. A newly locked target needs
# its entry here.
ON_THIS_HOST = {
    # PJRT_DEVICE=CPU: torch_xla on XLA:CPU; --privileged only exposes TPU chips (this sandbox's runtime refuses it).
    "tpu-vm": (
        ("--device", "tpu", "--cores", "1"),
        {},
        {("--privileged",): None, ("PJRT_DEVICE=TPU",): ("PJRT_DEVICE=CPU",)},
    ),
    # PyPI's CUDA build of torch trains on the CPU when no GPU is there; ULIMITS= leaves out NVIDIA's
    # memlock=-1, which this sandbox's runtime refuses.
    "cuda": (("--device", "cpu"), {"ULIMITS": ""}, {("--gpus", "all"): None}),
}


def locked_targets(repo_root: Path) -> list[str]:
    config = load_config(repo_root / "envkit.yaml")
    return [name for name in config.targets if (repo_root / "docker" / name / "requirements.lock").is_file()]


def swap_words(command: list[str], swaps: dict[tuple[str, ...], tuple[str, ...] | None]) -> list[str]:
    """``command`` with each run of words in ``swaps`` replaced; each must be there exactly once."""
    for words, replacement in swaps.items():
        starts = [i for i in range(len(command)) if tuple(command[i : i + len(words)]) == words]
        assert len(starts) == 1, f"run.sh's command should hold {' '.join(words)} once: {command}"
        command = [*command[: starts[0]], *(replacement or ()), *command[starts[0] + len(words) :]]
    return command


@pytest.fixture(scope="session", params=locked_targets(REPO_ROOT))
def committed(request, client, base_image, repo_root) -> tuple[str, str]:
    """A committed target's image, built once per session as a user builds it: the checkout's
    docker/<target>/ files, unmodified, on the stand-in base (Debian 12's Python 3.11, the
    targets' own), pip fetching the lock's files from the default index inside the build.

    Inside the build rather than from a wheelhouse: the 4 GB of wheels are not sent to
    BuildKit as build context for each target, and pip's cache mount hands tpu-vm's torch and
    nvidia-* files to the cuda build. HTTPS from containers here goes through a re-signing
    proxy whose CA is in the host bundle, which --ca-cert adds to the image (as a user behind
    such a proxy does).
    """
    target = request.param
    yield target, build_committed(target, base_image, repo_root)
    # Each recipe change makes a new image of several GB: keep the latest only.
    shutil.rmtree(staging_path(repo_root, target), ignore_errors=True)
    envkit("prune", target, "--config", str(repo_root / "envkit.yaml"), cwd=repo_root)


@engine_test
def test_a_committed_image_holds_exactly_its_lock(client, committed, repo_root):
    target, tag = committed
    lock = read_lock(repo_root / "docker" / target / "requirements.lock")
    labels = client.images.get(tag).labels
    assert labels[LOCK_LABEL] == lock.sha256 and labels["io.envkit.target"] == target
    assert b"No broken requirements found" in client.containers.run(tag, ["pip", "check"], remove=True)
    installed = json.loads(client.containers.run(tag, ["pip", "list", "--format", "json"], remove=True))
    assert {normalise(p["name"]): p["version"] for p in installed if p["name"] not in ("pip", "setuptools")} == {
        name: version for name, version in lock.packages.items() if name != "setuptools"
    }


@engine_test
def test_a_committed_image_runs_its_recipe_through_its_run_sh(client, committed, repo_root, docker_cli, caller_home):
    """run.sh's own command, with only the hardware words of ON_THIS_HOST swapped, run by a
    non-root caller (the tpu-vm image runs as root and hands its files over)."""
    target, tag = committed
    recipe_args, settings, swaps = ON_THIS_HOST[target]
    lock = read_lock(repo_root / "docker" / target / "requirements.lock")
    labels = client.images.get(tag).labels
    owner, as_caller = (os.getuid(), os.getgid()), []
    if os.geteuid() == 0:
        owner, as_caller = NON_ROOT, as_user(NON_ROOT)
    data, results = write_mnist(caller_home / "data", train_count=512, test_count=256), caller_home / "results"
    results.mkdir()
    os.chown(results, *owner)  # the caller's, as run.sh makes it (the dry run stops before that)
    run_sh = caller_home / "run.sh"
    shutil.copy(repo_root / "docker" / target / "run.sh", run_sh)  # the caller must be able to read it
    planned = subprocess.run(
        [
            *as_caller,
            str(run_sh),
            "python",
            "recipes/mnist.py",
            *recipe_args,
            "--no-download",
            "--epochs",
            "2",
            "--per-device-batch",
            "32",
            "--quiet",
        ],
        env={
            **os.environ,
            "ENVKIT_DRY_RUN": "1",
            "DOCKER": docker_cli,
            "DATA_DIR": str(data),
            "RESULTS_DIR": str(results),
            **settings,
        },
        cwd=caller_home,
        capture_output=True,
        text=True,
        check=True,
    )
    done = subprocess.run(swap_words(shlex.split(planned.stdout), swaps), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]

    [path] = results.glob("mnist-*.json")
    document = read_results(results, path.stem[len("mnist-") :])
    environment = document["environment"]
    assert environment["torch"].startswith(labels["io.envkit.pin.torch"]) and environment["lock_sha256"] == lock.sha256
    assert environment["image"] == f"envkit-{target}:latest" and environment["python"].startswith(
        labels["io.envkit.pin.python"]
    )
    if target == "tpu-vm":
        assert environment["device_name"] == "XLA:CPU" and environment["torch_xla"] == labels["io.envkit.pin.torch_xla"]
    assert document["metrics"]["test_accuracy"] > 0.5
    assert {(path.stat().st_uid, path.stat().st_gid) for path in results.rglob("*")} == {owner}


# ---------------------------------------------------------------- the scripts CI calls (fast, no engine)


@engine_test
def test_verify_rebuilds_with_no_cache_and_finds_the_same_packages(client, project, build_flags, built):
    done = envkit("verify", "cpu", *build_flags, cwd=project, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "reproduced"
    # The Docker engine gives no identical digests: the contents decide, every file's included.
    files_line = next(line for line in lines if line.startswith("files: "))
    print(files_line)
    assert re.fullmatch(r"files: 0 of \d+ differ in content", files_line), done.stdout
    assert client.images.get("envkit-cpu:latest").id == client.images.get(built).id  # verify moved no tag
    assert "envkit-cpu:verify" not in {tag for image in client.images.list("envkit-cpu") for tag in image.tags}


@engine_test
def test_verify_of_a_target_never_built_is_one_line_and_writes_nothing(client, project, tmp_path):
    config = yaml.safe_load((project / "envkit.yaml").read_text())
    config["targets"] = {"never-built": config["targets"]["cpu"]}
    (tmp_path / "envkit.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "ENVKIT_CACHE_DIR": str(tmp_path / "cache")}
    done = envkit("verify", "never-built", "--config", "envkit.yaml", cwd=tmp_path, env=env, check=False)
    assert (
        done.returncode == 2
        and done.stdout == ""
        and done.stderr
        == (
            "envkit: error: no image envkit-never-built:latest in the engine: build it first with 'envkit build never-built'\n"
        )
    )
    assert not (tmp_path / "cache" / "contexts").exists()


@engine_test
def test_diff_names_the_one_package_and_variable_that_differ(client, project, built, saved):
    # B: the same image with tqdm uninstalled and one variable changed, as a collaborator's might be.
    container = client.containers.run(
        built, ["python", "-m", "pip", "uninstall", "-y", "-q", "tqdm"], detach=True, user="0"
    )
    try:
        assert container.wait()["StatusCode"] == 0
        other = container.commit("envkit-difftest", "b", changes=["ENV ENVKIT_EXTRA=1"])
    finally:
        container.remove(force=True)
    try:
        for a in (built, *saved):  # an engine image, its saved tarball, or the tarball's manifest
            done = envkit("diff", a, "envkit-difftest:b", cwd=project, check=False)
            assert done.returncode == 1, done.stderr
            assert "python packages: 1 of" in done.stdout and "  - tqdm " in done.stdout
            assert "apt packages: same" in done.stdout
            assert "  + ENVKIT_EXTRA 1 (only in B)" in done.stdout
        assert (
            envkit("diff", "cpu", built, cwd=project, check=False).returncode == 0
        )  # a target name is its latest image
    finally:
        client.images.remove(other.id, force=True)


# ---------------------------------------------------------------- locked images (benchmarks/offline_lock.py)


@engine_test
def test_a_locked_image_holds_exactly_its_lock_and_records_it(client, locked, base_image):
    project, wheels = locked
    lock_file = project / "docker" / "cpu" / "requirements.lock"
    lock = read_lock(lock_file)
    image = client.images.get(locked_build(project, wheels, base_image).stdout.strip())
    assert image.labels[LOCK_LABEL] == lock.sha256 and "io.envkit.lock" not in image.labels
    assert f"ENVKIT_LOCK_SHA256={lock.sha256}" in image.attrs["Config"]["Env"]
    freeze = client.containers.run(image.id, ["pip", "list", "--format", "json"], remove=True)
    installed = {normalise(entry["name"]): entry["version"] for entry in json.loads(freeze)}
    installed = {name: version for name, version in installed.items() if name not in ("pip", "setuptools")}
    assert installed == {name: version for name, version in lock.packages.items() if name != "setuptools"}
    assert (
        client.containers.run(image.id, ["cat", "/opt/envkit/requirements.lock"], remove=True) == lock_file.read_bytes()
    )


@engine_test
def test_an_edited_hash_fails_the_build_in_one_line_naming_the_package(client, locked, base_image, tmp_path):
    project, wheels = locked
    edited = tmp_path / "edited"
    shutil.copytree(project, edited)
    lock_file = edited / "docker" / "cpu" / "requirements.lock"
    text = lock_file.read_text()
    torch_hash = re.search(r"^torch==\S+ \\\n    --hash=sha256:([0-9a-f]{64})", text, flags=re.MULTILINE).group(1)
    edited_text = text.replace(torch_hash, "0" * 64)
    lock_file.write_text(edited_text)
    # As when the index serves another file than the one locked: the header's packages-sha256 follows
    # the edit (render would refuse a hand-edited lock), so only pip's hash check can notice.
    body = read_lock(lock_file).body_sha256
    lock_file.write_text(
        re.sub(r"^# packages-sha256: [0-9a-f]{64}$", f"# packages-sha256: {body}", edited_text, flags=re.M)
    )
    envkit("render", "--all", "--config", "envkit.yaml", cwd=edited)  # the lock's inputs are unchanged
    done = locked_build(edited, wheels, base_image, check=False)
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.splitlines()[-1]
    assert re.fullmatch(
        rf"envkit: error: docker build of envkit-cpu:[0-9a-f]{{12}} failed: pip refused torch==2\.13\.0\+cpu: its file has "
        rf"sha256 {torch_hash}, which the lock does not list \(expected 0{{64}}\); .*",
        last,
    ), last
    shutil.rmtree(staging_path(edited, "cpu"), ignore_errors=True)


@engine_test
def test_diff_of_two_locks_names_the_one_package_that_differs(client, locked, base_image, tmp_path):
    """Two builds whose locks differ in one package (tqdm), as two collaborators' might."""
    project, wheels = locked
    a = locked_build(project, wheels, base_image).stdout.strip()
    other = tmp_path / "other"
    shutil.copytree(project, other)
    config = yaml.safe_load((other / "envkit.yaml").read_text())
    config["targets"]["cpu"]["pip_packages"] = ["tqdm==4.66.5"]
    (other / "envkit.yaml").write_text(yaml.safe_dump(config))
    # The session's wheels first: pip finds every file of the new lock but tqdm's already there, and fetches that one.
    (tmp_path / "wheels").mkdir()
    for wheel in wheels.glob("*.whl"):
        os.link(wheel, tmp_path / "wheels" / wheel.name)
    try:
        # The previous lock is uv's preference: only tqdm moves.
        lock = lock_and_render(other, torch_index(tmp_path / "torch-index"))
        offline_lock.fill_wheelhouse(lock, tmp_path / "wheels")
    except OfflineLockError as exc:
        unavailable(f"cannot relock with tqdm 4.66.5: {exc}")
    b = locked_build(other, tmp_path / "wheels", base_image).stdout.strip()
    try:
        done = envkit("diff", a, b, cwd=project, check=False)
        assert done.returncode == 1, done.stderr
        lines = done.stdout.splitlines()
        section = lines.index(next(line for line in lines if line.startswith("python packages: ")))
        assert lines[section].startswith("python packages: 1 of "), done.stdout
        assert "tqdm" in lines[section + 1] and "4.67.1" in lines[section + 1] and "4.66.5" in lines[section + 1]
        assert "apt packages: same" in done.stdout
    finally:
        client.images.remove(b, force=True)
        locked_build(project, wheels, base_image)  # latest back to A
        shutil.rmtree(staging_path(other, "cpu"), ignore_errors=True)

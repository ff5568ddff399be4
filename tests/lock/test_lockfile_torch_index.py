"""The torch-index path of `envkit lock` and `envkit venv`, with real wheels on a loopback PEP 503 index.

PyTorch's CPU index cannot be reached from here, and its content is never made up: the
stand-in serves a real PyTorch CPU wheel, torch 2.13.0+cpu (ENVKIT_TEST_WHEELS, default
/opt/wheels: the file this machine holds, as downloaded from that index), with no hashes in
its links, as PyTorch's index served torch until October 2025 (pytorch#164347), so uv must
hash the file itself. The default index's stand-in serves the real wheels of torch's
dependencies, fetched once by pip from the index pip is configured with. Each hash the lock
records is then compared with sha256 of the file served for it, and each package's index is
checked by taking a wheel away from one index.

Slow (about a minute: uv reads the 190 MB wheel, the venv installs it, a recipe runs in it);
without the wheel or the index it skips, and fails instead under ENVKIT_REQUIRE_INDEX=1 (CI).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from lock_project import seed_recipe_experiment
from paths import REPO_ROOT
from wheel_index import IndexServer, file_sha256
from xla_env import environment_missing

from envkit.cli import main
from envkit.lock.lockfile import read_lock
from envkit.support import provenance

pytestmark = pytest.mark.slow

TORCH_WHEELS = Path(os.environ.get("ENVKIT_TEST_WHEELS", "/opt/wheels"))
TORCH = "2.13.0"
PYTHON = "{}.{}".format(*sys.version_info[:2])


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> tuple[Path, list[Path]]:
    """(the real torch CPU wheel, the real wheels of its dependencies and tqdm)."""
    if PYTHON != "3.11":
        pytest.skip(f"the torch CPU wheel here is cp311; this is Python {PYTHON}")
    found = sorted(TORCH_WHEELS.glob(f"torch-{TORCH}+cpu-cp311-cp311-manylinux*_x86_64.whl"))
    if not found:
        environment_missing(
            f"no torch {TORCH}+cpu wheel in {TORCH_WHEELS} (set ENVKIT_TEST_WHEELS)", "ENVKIT_REQUIRE_INDEX"
        )
    deps = tmp_path_factory.mktemp("deps")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--only-binary=:all:",
            "--dest",
            str(deps),
            "--python-version",
            "3.11",
            "--platform",
            "manylinux_2_28_x86_64",
            str(found[0]),
            "tqdm==4.67.1",
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        environment_missing(
            f"pip cannot fetch torch's dependencies: {(done.stderr.strip().splitlines() or ['?'])[-1]}",
            "ENVKIT_REQUIRE_INDEX",
        )
    return found[0], sorted(path for path in deps.glob("*.whl") if not path.name.startswith("torch-"))


@pytest.fixture()
def served(tmp_path, wheels, monkeypatch):
    """Loopback indexes: "pytorch" with the torch wheel (no link hashes), "pypi" with everything else."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")  # the base digest is never asked for
    torch_wheel, deps = wheels
    with IndexServer(tmp_path / "www") as server:
        pypi, pytorch = server.index("pypi", link_hashes=False), server.index("pytorch", link_hashes=False)
        files = {"torch": pytorch.publish(torch_wheel)}
        for wheel in deps:
            files[wheel.name.split("-", 1)[0].lower().replace("_", "-")] = pypi.publish(wheel)
        yield pypi, pytorch, files


def project(root: Path, pypi_url: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    target = {
        "kind": "cpu",
        "torch": TORCH,
        "python": "3.11",
        "torchvision": False,
        # The stand-in indexes hold x86-64 wheels alone (the one torch CPU wheel here), so the target builds
        # for that platform only; the kind's default adds linux/arm64, which no wheel here serves.
        "platforms": ["linux/amd64"],
        "pip_index_url": pypi_url,
        "base_image": "127.0.0.1:9/python:3.11-slim-bookworm",
    }
    # A recipe runs in the venv below: the project declares it, so its lock holds tqdm.
    config = {"experiments": seed_recipe_experiment("cpu"), "targets": {"cpu": target}}
    (root / "envkit.yaml").write_text(yaml.safe_dump(config))
    return root / "envkit.yaml"


def envkit(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def lock_hashes(path: Path) -> dict[str, set[str]]:
    hashes: dict[str, set[str]] = {}
    name = None
    for line in path.read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            name = line.split("==")[0]
        elif "--hash=sha256:" in line:
            hashes.setdefault(name, set()).add(line.split("--hash=sha256:")[1].rstrip(" \\"))
    return hashes


def test_torch_comes_from_pytorchs_index_by_its_real_hash_and_nothing_else_does(tmp_path, served, wheels, capsys):
    pypi, pytorch, files = served
    config = project(tmp_path / "p", pypi.url)
    code, out, err = envkit(
        capsys, "lock", "--target", "cpu", "--config", str(config), "--torch-index-url", pytorch.url
    )
    assert code == 0, err
    lock_file = tmp_path / "p" / "docker" / "cpu" / "requirements.lock"
    lock = read_lock(lock_file)
    assert lock.packages["torch"] == f"{TORCH}+cpu" and "tqdm" in lock.packages
    assert not any(name.startswith(("nvidia-", "triton")) for name in lock.packages)
    # Every file hashed by uv from the bytes it was served: one file per package, the one on its own index.
    assert lock_hashes(lock_file) == {name: {file_sha256(files[name])} for name in lock.packages}
    assert files["torch"].parent.parent == pytorch.root and all(
        files[n].parent.parent == pypi.root for n in lock.packages if n != "torch"
    )
    assert (
        "# indexes: torch, torchvision from PyTorch's cpu index; everything else from the target's pip_index_url\n"
        in lock_file.read_text()
    )

    # A dependency that only PyTorch's index serves is never taken from there: no lock at all.
    shutil.rmtree(files["typing-extensions"].parent)
    pytorch.publish(next(path for path in wheels[1] if path.name.startswith("typing_extensions-")))
    again = project(tmp_path / "q", pypi.url)
    code, out, err = envkit(capsys, "lock", "--target", "cpu", "--config", str(again), "--torch-index-url", pytorch.url)
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert (
        line.startswith("envkit: error: target cpu: uv cannot resolve its requirements: ")
        and "typing-extensions" in line
    )
    assert not (tmp_path / "q" / "docker").exists()


def test_the_lock_becomes_a_host_venv_whose_runs_name_it(tmp_path, served, capsys):
    pypi, pytorch, _ = served
    config = project(tmp_path / "p", pypi.url)
    assert envkit(capsys, "lock", "--target", "cpu", "--config", str(config), "--torch-index-url", pytorch.url)[0] == 0
    lock = read_lock(tmp_path / "p" / "docker" / "cpu" / "requirements.lock")
    venv = tmp_path / "venv"
    code, out, err = envkit(
        capsys, "venv", "cpu", "--config", str(config), "--path", str(venv), "--torch-index-url", pytorch.url
    )
    assert code == 0, err
    assert out.startswith(
        f"made {venv} from {config.parent}/docker/cpu/requirements.lock ({len(lock.packages)} packages, "
        f"lock sha256 {lock.sha256[:12]}) with Python 3.11."
    )
    # A recipe run in it, through the run wrapper as `envkit experiment --python` starts it, records the lock its
    # interpreter was made from (the wrapper reads the venv's marker; the recipe itself records only torch's facts).
    results = tmp_path / "results"
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            provenance.__file__,
            str(venv / "bin" / "python"),
            str(REPO_ROOT / "recipes" / "mnist.py"),
            "--device",
            "cpu",
            "--dataset",
            "fake",
            "--epochs",
            "1",
            "--max-steps",
            "3",
            "--fake-train-size",
            "256",
            "--fake-test-size",
            "64",
            "--quiet",
            "--results-dir",
            str(results),
        ],
        capture_output=True,
        text=True,
        env={key: value for key, value in os.environ.items() if key != "ENVKIT_LOCK_SHA256"}
        | {"ENVKIT_RESULTS_DIR": str(results)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [written] = results.glob("mnist-*.json")
    environment = json.loads(written.read_text())["environment"]
    assert (
        environment["lock_sha256"] == lock.sha256 == json.loads((venv / "envkit-lock.json").read_text())["lock_sha256"]
    )
    assert environment["torch"] == f"{TORCH}+cpu" and environment["image"] is None
    assert f"torch=={TORCH}+cpu" in environment["distributions"]

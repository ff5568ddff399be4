"""`envkit lock` against package indexes the tests serve on 127.0.0.1 (tests/wheel_index.py).

"pypi" stands for the default index (the targets' pip_index_url points at it) and
"pytorch" for PyTorch's variant index (--torch-index-url). Both serve a decoy
filelock and pillow, so a lock that takes either from the wrong index shows.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import paths
import pytest
from lock_project import NO_REGISTRY, envkit, lock_text, write_project
from wheel_index import IndexServer
from xla_env import environment_missing

from envkit.lock.inputs import lock_inputs, requirements_inputs
from envkit.lock.lockfile import read_lock, requirements_lock_path
from envkit.lock.status import cuda_only_packages
from envkit.project.load import load_config

GOLDEN = paths.GOLDEN / "lock"
INPUTS_HASH = re.compile(r"^(# inputs-sha256: )[0-9a-f]{64}$", re.MULTILINE)


@pytest.fixture()
def locked(tmp_path, indexes, capsys):
    """A project whose three targets were just locked against the local indexes."""
    pypi, pytorch = indexes
    config = write_project(tmp_path, pypi.url)
    code, out, err = envkit(capsys, "lock", "--all", "--config", str(config), "--torch-index-url", pytorch.url)
    assert code == 0, err
    assert sorted(out.splitlines()) == [
        "wrote docker/cpu/requirements.lock (5 packages)",
        "wrote docker/cuda/requirements.lock (6 packages)",
        "wrote docker/tpu-vm/requirements.lock (9 packages)",
    ]
    return config


@pytest.mark.parametrize("name", ["cpu", "cuda", "tpu-vm"])
def test_lock_text_is_golden(locked, indexes, name, update_golden):
    text = lock_text(locked, name)
    # Checked apart from the golden file, which the code's own output wrote: every hash is the
    # sha256 of a wheel the index served, computed here from the file, and the header's
    # packages-sha256 is that of the lines below the header.
    served = {
        hashlib.sha256(wheel.read_bytes()).hexdigest() for index in indexes for wheel in index.root.rglob("*.whl")
    }
    hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", text)
    assert hashes and set(hashes) <= served
    body = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))
    assert f"# packages-sha256: {hashlib.sha256(body.encode()).hexdigest()}\n" in text
    # The inputs include the index URLs, whose port differs per run; the line is checked below.
    recorded = INPUTS_HASH.search(text)
    assert recorded and text.count(recorded.group(0)) == 1
    assert recorded.group(0).split()[-1] == lock_inputs(load_config(locked).target(name)).digest()
    normalised = INPUTS_HASH.sub(r"\g<1><sha256 of the inputs>", text)
    golden = GOLDEN / f"{name}.lock"
    if update_golden:
        golden.write_text(normalised)
    assert normalised == golden.read_text()


def test_torch_comes_from_pytorch_index_and_everything_else_from_the_default(locked, indexes):
    pypi, pytorch = indexes
    cpu = read_lock(locked.parent / "docker" / "cpu" / "requirements.lock")
    assert cpu.packages == {
        "filelock": "3.0",
        "pillow": "12.0.0",
        "torch": "2.9.0+cpu",
        "torchvision": "0.24.0+cpu",
        "tqdm": "4.67.1",
    }
    text = lock_text(locked, "cpu")
    for index, name in ((pytorch, "torch"), (pytorch, "torchvision"), (pypi, "filelock"), (pypi, "pillow")):
        # The locked version's wheel by name: the pytorch index serves +cpu and +cu126 side by side, and a
        # folder's order is the file system's (tmpfs lists the newest first: the +cu126 wheel).
        (wheel,) = (index.root / name).glob(f"{name}-{cpu.packages[name]}-*.whl")
        assert f"--hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}" in text, name
    # PyPI's CUDA build of torch brings nvidia-* and triton; the cpu lock must not.
    assert not any(package.startswith(("nvidia-", "triton")) for package in cpu.packages)
    tpu = read_lock(locked.parent / "docker" / "tpu-vm" / "requirements.lock")
    assert {tpu.packages["torch"], tpu.packages["triton"], tpu.packages["libtpu"]} == {"2.9.0", "3.5.0", "0.0.21"}


def test_relocking_is_byte_identical(locked, indexes, capsys):
    before = {name: lock_text(locked, name) for name in ("cpu", "cuda", "tpu-vm")}
    code, out, _ = envkit(capsys, "lock", "--all", "--config", str(locked), "--torch-index-url", indexes[1].url)
    assert code == 0 and all(line.startswith("unchanged ") for line in out.splitlines())
    assert {name: lock_text(locked, name) for name in before} == before


def change_a_pin(config: Path, pypi_url: str) -> None:
    write_project(config.parent, pypi_url, **{"tpu-vm": {"pip_packages": ["tqdm==4.67.0"]}})


def add_unhashed_and_cuda_packages_to_cpu(config: Path, pypi_url: str) -> None:
    cpu = config.parent / "docker" / "cpu" / "requirements.lock"
    cpu.write_text(
        cpu.read_text() + "nvidia-cublas-cu12==12.8.4.1\ntriton==3.5.0 \\\n    --hash=sha256:" + "0" * 64 + "\n"
    )


def pin_an_older_version_by_hand(config: Path, pypi_url: str) -> None:
    """Before: `lock --check` passed this; only a later `render --check` noticed the lock's sha256 had moved."""
    tpu = config.parent / "docker" / "tpu-vm" / "requirements.lock"
    tpu.write_text(tpu.read_text().replace("tqdm==4.67.1", "tqdm==4.67.0"))


def edit_the_header(old: str, new: str):
    """Issue 39 §17: a hand-edited header line of docker/cuda/requirements.lock passed `lock --check` (exit 0), and
    render wrote an edited base digest into FROM."""

    def edit(config: Path, pypi_url: str) -> None:
        cuda = config.parent / "docker" / "cuda" / "requirements.lock"
        text = cuda.read_text()
        assert old in text
        cuda.write_text(text.replace(old, new, 1))

    return edit


PIN_THE_BASE = edit_the_header(" (no digest found: pinned by tag only)", "@sha256:" + "e" * 64)
HEADER_EDITED = (
    "cuda: stale: docker/cuda/requirements.lock: its header's '# {}' line is not what envkit lock writes for its "
    "inputs (edited after it was locked, or locked by an older envkit): envkit lock --target cuda"
)


@pytest.mark.parametrize(
    ("edit", "stale"),
    [
        (
            PIN_THE_BASE,
            "cuda: stale: docker/cuda/requirements.lock: its base-image line (127.0.0.1:9/nvidia/cuda:12.6.3-base-"
            f"ubuntu24.04@sha256:{'e' * 64}) names a digest that its packages-sha256 does not cover: edited after it "
            "was locked, or locked by an older envkit: envkit lock --target cuda",
        ),
        (
            edit_the_header("# platform: x86_64-manylinux_2_", "# platform: x86_64-manylinux_1_"),
            HEADER_EDITED.format("platform"),
        ),
        (
            edit_the_header("# indexes: torch", "# indexes: every package from elsewhere; torch"),
            HEADER_EDITED.format("indexes"),
        ),
        (
            edit_the_header("# top-level: torch==2.9.0+cu126", "# top-level: torch==2.8.0+cu126"),
            HEADER_EDITED.format("top-level"),
        ),
        (
            edit_the_header("# image platforms: linux/amd64", "# image platforms: linux/arm64"),
            HEADER_EDITED.format("image platforms"),
        ),
        (
            change_a_pin,
            "tpu-vm: stale: docker/tpu-vm/requirements.lock: its inputs changed since it was locked "
            "(envkit lock --target tpu-vm)",
        ),
        (
            add_unhashed_and_cuda_packages_to_cpu,
            "cpu: stale: docker/cpu/requirements.lock: its packages were edited after it was locked (the packages-sha256 "
            "of its header no longer matches): envkit lock --target cpu; no --hash for nvidia-cublas-cu12==12.8.4.1; "
            "a cpu lock with CUDA packages: nvidia-cublas-cu12, triton",
        ),
        (
            pin_an_older_version_by_hand,
            "tpu-vm: stale: docker/tpu-vm/requirements.lock: its packages were edited after it was locked (the "
            "packages-sha256 of its header no longer matches): envkit lock --target tpu-vm",
        ),
    ],
    ids=["base-digest", "platform", "indexes", "top-level", "image-platforms", "a-pin", "cuda-in-cpu", "older-version"],
)
def test_check_says_each_target_is_fresh_or_why_it_is_stale(locked, indexes, capsys, edit, stale):
    code, out, err = envkit(capsys, "lock", "--check", "--config", str(locked))
    assert (code, err) == (0, "")
    assert [line.split(" (sha256 ")[0] for line in out.splitlines()] == [
        f"{name}: fresh: docker/{name}/requirements.lock" for name in ("cpu", "cuda", "tpu-vm")
    ]
    edit(locked, indexes[0].url)
    code, out, err = envkit(capsys, "lock", "--check", "--config", str(locked))
    target = stale.split(":")[0]
    assert (code, err) == (
        1,
        f"envkit: error: locks are stale ({target}): run `envkit lock --target {target}` and commit\n",
    )
    assert stale in out.splitlines()
    assert len(out.splitlines()) == 3, "the other targets are still said to be fresh"


@pytest.mark.parametrize(
    ("edit", "target", "why"),
    [
        (pin_an_older_version_by_hand, "tpu-vm", "its packages were edited after it was locked"),
        (PIN_THE_BASE, "cuda", "its base-image line (127.0.0.1:9/nvidia/cuda:12.6.3-base-ubuntu24.04@sha256:eee"),
    ],
    ids=["a-package", "the-base-digest"],
)
def test_render_refuses_a_hand_edited_lock(locked, indexes, capsys, repo_root, edit, target, why):
    shutil.copytree(repo_root / "templates", locked.parent / "templates")
    edit(locked, indexes[0].url)
    code, out, err = envkit(capsys, "render", "--all", "--config", str(locked))
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert f"{target}/requirements.lock: {why}" in err
    assert not (locked.parent / "docker" / target / "Dockerfile").exists()


UNLOCKED = "cpu: unlocked: docker/cpu/requirements.lock does not exist (envkit lock --target cpu)"


def test_check_fails_on_an_unlocked_target_unless_it_may_be(tmp_path, capsys):
    """Issue 32 §9: before, --check passed (exit 0) with cpu unlocked, so a CI gate passed an unpinned image."""
    config = write_project(tmp_path, "http://127.0.0.1:9/simple/")
    code, out, err = envkit(capsys, "lock", "--check", "--config", str(config), "--target", "cpu")
    assert (code, out) == (1, f"{UNLOCKED}\n")
    assert err == (
        "envkit: error: unlocked: cpu: run `envkit lock --target cpu` and commit, or give the target "
        "unlocked: {allowed: REASON} (envkit lock --check --allow-unlocked for this check)\n"
    )
    code, out, _ = envkit(capsys, "lock", "--check", "--config", str(config), "--target", "cpu", "--allow-unlocked")
    assert (code, out) == (0, f"{UNLOCKED}; allowed: --allow-unlocked\n")
    config = write_project(tmp_path, "http://127.0.0.1:9/simple/", cpu={"unlocked": {"allowed": "no CPU index in CI"}})
    code, out, _ = envkit(capsys, "lock", "--check", "--config", str(config), "--target", "cpu")
    assert (code, out) == (0, f"{UNLOCKED}; allowed: no CPU index in CI\n")
    code, out, err = envkit(capsys, "lock", "--check", "--config", str(config), "--target", "cpu", "--target", "cuda")
    assert code == 1 and out.splitlines()[1].startswith("cuda: unlocked") and "unlocked: cuda:" in err


def test_check_honours_every_target_given(locked, indexes, capsys):
    """Issue 33 §13: before, --target a --target b checked b alone and said fresh while a was stale."""
    pin_an_older_version_by_hand(locked, indexes[0].url)
    code, out, err = envkit(capsys, "lock", "--check", "--config", str(locked), "--target", "tpu-vm", "--target", "cpu")
    assert code == 1 and [line.split(":")[0] for line in out.splitlines()] == ["tpu-vm", "cpu"]
    assert "locks are stale (tpu-vm)" in err


def test_relock_keeps_versions_until_upgrade_package(locked, indexes, capsys):
    pypi, pytorch = indexes
    pypi.add("filelock", "3.1")
    pypi.add("pillow", "12.1.0")
    code, _, err = envkit(capsys, "lock", "--target", "cpu", "--config", str(locked), "--torch-index-url", pytorch.url)
    assert code == 0, err
    assert read_lock(locked.parent / "docker" / "cpu" / "requirements.lock").packages["filelock"] == "3.0"
    code, out, err = envkit(
        capsys,
        "lock",
        "--target",
        "cpu",
        "--config",
        str(locked),
        "--torch-index-url",
        pytorch.url,
        "--upgrade-package",
        "filelock",
    )
    assert (code, out) == (0, "wrote docker/cpu/requirements.lock (5 packages)\n"), err
    packages = read_lock(locked.parent / "docker" / "cpu" / "requirements.lock").packages
    assert (packages["filelock"], packages["pillow"]) == ("3.1", "12.0.0")


def test_upgrade_package_not_in_the_lock_is_one_line(locked, capsys):
    before = lock_text(locked, "cpu")
    code, out, err = envkit(capsys, "lock", "--target", "cpu", "--config", str(locked), "--upgrade-package", "numpy")
    assert (code, out) == (2, "")
    assert err == (
        "envkit: error: --upgrade-package numpy: no such package in docker/cpu/requirements.lock; name a package "
        "the lock pins (or drop --upgrade-package to lock the target anew)\n"
    )
    assert lock_text(locked, "cpu") == before


def test_unreachable_default_index_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    config = write_project(tmp_path, "http://127.0.0.1:9/simple/")
    code, out, err = envkit(capsys, "lock", "--target", "tpu-vm", "--config", str(config))
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith(
        "envkit: error: target tpu-vm: the package index http://127.0.0.1:9/simple/ cannot be reached ("
    )
    assert not (tmp_path / "docker" / "tpu-vm").exists()


def test_unreachable_pytorch_index_says_the_target_cannot_be_locked_here(tmp_path, indexes, capsys):
    config = write_project(tmp_path, indexes[0].url)
    code, out, err = envkit(
        capsys, "lock", "--target", "cpu", "--config", str(config), "--torch-index-url", "http://127.0.0.1:9/whl/cpu"
    )
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith(
        "envkit: error: target cpu cannot be locked here: PyTorch's cpu index http://127.0.0.1:9/whl/cpu cannot be reached ("
    )
    assert line.endswith("); lock it where that index answers, or pass --torch-index-url MIRROR")
    assert not (tmp_path / "docker").exists()


def test_a_cuda_variant_of_an_unreachable_pytorch_index_names_the_one_the_default_index_has(tmp_path, indexes, capsys):
    config = write_project(tmp_path, indexes[0].url)
    code, out, err = envkit(
        capsys, "lock", "--target", "cuda", "--config", str(config), "--torch-index-url", "http://127.0.0.1:9/whl/cu126"
    )
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith(
        "envkit: error: target cuda cannot be locked here: PyTorch's cu126 index http://127.0.0.1:9/whl/cu126 cannot be reached ("
    )
    assert line.endswith(
        '; the default index\'s torch 2.9.0 is the CUDA 12.8 build, which locks from that index alone (cuda: "12.8")'
    )
    assert not (tmp_path / "docker").exists()


def arch_wheels(pytorch, *machines: str) -> dict[str, str]:
    """PyTorch's CPU torch as built for each machine (x86_64, aarch64), as its index serves it: machine -> sha256."""
    pytorch.add("torchvision", "0.24.0+cpu", "torch==2.9.0", "pillow")
    return {
        m: pytorch.add("torch", "2.9.0+cpu", "filelock>=3", tag=f"cp311-cp311-manylinux_2_28_{m}") for m in machines
    }


def test_a_cpu_image_for_two_architectures_is_locked_for_each_and_installs_its_own(tmp_path, indexes, capsys):
    """cpu lists linux/amd64 and linux/arm64: one lock with each architecture's torch wheel hashed, and pip, as the
    Dockerfile runs it in an arm64 build, takes the aarch64 file from it (a plain pip download for that platform)."""
    pypi, _ = indexes
    with IndexServer(tmp_path / "arch") as server:
        pytorch = server.index("pytorch")
        hashes = arch_wheels(pytorch, "x86_64", "aarch64")
        config = write_project(tmp_path, pypi.url)
        code, out, err = envkit(
            capsys, "lock", "--target", "cpu", "--config", str(config), "--torch-index-url", pytorch.url
        )
        assert (code, out) == (0, "wrote docker/cpu/requirements.lock (5 packages)\n"), err
        text = lock_text(config, "cpu")
        header = [line for line in text.splitlines() if line.startswith(("# platform", "# image", "# wheels"))]
        assert header == [
            "# platform: universal: linux/amd64 linux/arm64, python 3.11",
            "# image platforms: linux/amd64 linux/arm64",
            "# wheels: linux/amd64 python 3.11: ok",
            "# wheels: linux/arm64 python 3.11: ok",
        ]
        assert all(f"--hash=sha256:{sha}" in text for sha in hashes.values())
        fetched = tmp_path / "fetched"
        # pip takes --platform's tag as given: the aarch64 wheel's own, which the arm64 image's glibc 2.36 loads.
        done = subprocess.run(
            [sys.executable, "-m", "pip", "--isolated", "download", "--quiet", "--no-deps", "--require-hashes", "--only-binary=:all:",
             "--platform", "manylinux_2_28_aarch64", "--python-version", "3.11", "--index-url", pypi.url,
             "--find-links", f"{pytorch.url}torch/", "--find-links", f"{pytorch.url}torchvision/",
             "--dest", str(fetched), "-r", str(config.parent / "docker" / "cpu" / "requirements.lock")],
            capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert [p.name for p in fetched.glob("torch-*")] == ["torch-2.9.0+cpu-cp311-cp311-manylinux_2_28_aarch64.whl"]


def test_an_architecture_the_lock_has_no_wheel_for_is_refused_and_nothing_written(tmp_path, indexes, capsys):
    pypi, _ = indexes
    with IndexServer(tmp_path / "arch") as server:
        pytorch = server.index("pytorch")
        arch_wheels(pytorch, "x86_64")
        config = write_project(tmp_path, pypi.url)
        argv = ("lock", "--target", "cpu", "--config", str(config), "--torch-index-url", pytorch.url)
        code, out, err = envkit(capsys, *argv)
        assert (code, out) == (2, "")
        assert err == (
            "envkit: error: target cpu: no wheel on linux/arm64 python 3.11 (torch): pin versions that have one, mark "
            "them off there (e.g. `; platform_machine != 'aarch64'`), or leave that platform out (the target's "
            "platforms)\n"
        )
        assert not (tmp_path / "docker").exists()
        # Left out, the target locks for the one platform it names.
        write_project(tmp_path, pypi.url, cpu={"platforms": ["linux/amd64"]})
        code, _, err = envkit(capsys, *argv)
        assert code == 0, err
        assert "# platform: x86_64-manylinux_2_36, python 3.11\n# image platforms: linux/amd64\n" in lock_text(
            config, "cpu"
        )


def test_a_configured_digest_that_cannot_be_verified_is_recorded_with_a_warning(tmp_path, indexes, capsys):
    base = f"{NO_REGISTRY}/python:3.11-slim-bookworm@sha256:" + "a" * 64
    config = write_project(tmp_path, indexes[0].url, **{"tpu-vm": {"base_image": base}})
    code, _, err = envkit(capsys, "lock", "--target", "tpu-vm", "--config", str(config))
    assert code == 0
    assert f"# base-image: {base}\n" in lock_text(config, "tpu-vm")
    [warning] = err.splitlines()
    assert warning.startswith(
        f"envkit: warning: target tpu-vm: digest of {NO_REGISTRY}/python:3.11-slim-bookworm not verified: "
    )


def test_unresolvable_requirements_are_one_line(tmp_path, indexes, capsys):
    config = write_project(tmp_path, indexes[0].url, **{"tpu-vm": {"pip_packages": ["tqdm==9.9.9"]}})
    code, _, err = envkit(capsys, "lock", "--target", "tpu-vm", "--config", str(config))
    assert code == 2
    [line] = err.splitlines()
    assert line.startswith("envkit: error: target tpu-vm: uv cannot resolve its requirements: ") and "tqdm" in line


def test_unknown_target_is_one_line(tmp_path, capsys):
    config = write_project(tmp_path, "http://127.0.0.1:9/simple/")
    code, _, err = envkit(capsys, "lock", "--target", "gpu", "--config", str(config))
    assert code == 2 and err.startswith("envkit: error: unknown target 'gpu'; targets in ") and err.count("\n") == 1


def test_lock_needs_a_target_choice(tmp_path, capsys):
    config = write_project(tmp_path, "http://127.0.0.1:9/simple/")
    assert envkit(capsys, "lock", "--config", str(config)) == (
        2,
        "",
        "envkit: error: envkit lock: choose the targets: --target NAME or --all\n",
    )


def test_the_repo_locks_pass_check_and_name_the_unlocked_targets(repo_root):
    done = subprocess.run(
        [sys.executable, "-m", "envkit", "lock", "--check"], cwd=repo_root, capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stderr) == (0, "")
    # cpu only: its torch exists only on PyTorch's CPU index. cuda is the default index's own build.
    assert [line.split(":")[:2] for line in done.stdout.splitlines()] == [
        ["cpu", " unlocked"],
        ["cuda", " fresh"],
        ["tpu-vm", " fresh"],
        ["colab-tpu", " fresh"],
        ["colab-t4", " fresh"],
        ["kaggle-tpu", " fresh"],
    ]


def test_the_host_environments_locks_pass_check(repo_root):
    inputs = sorted(str(path.relative_to(repo_root)) for path in (repo_root / "requirements").glob("*.in"))
    assert inputs == [
        "requirements/bench.in",
        "requirements/dev.in",
        "requirements/sky.in",
        "requirements/tpu.in",
        "requirements/xla.in",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "envkit", "lock", "--check", "--requirements", *inputs],
        cwd=repo_root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    # tpu only is unlocked: TorchTPU needs PyTorch's CPU build of torch, which only PyTorch's CPU index serves.
    assert [line.split(": ")[:2] for line in done.stdout.splitlines()] == [
        [name, "unlocked" if name == "requirements/tpu.in" else "fresh"] for name in inputs
    ]


def test_a_requirements_input_names_the_platforms_and_pythons_it_serves(tmp_path):
    from envkit.lock.inputs import requirements_inputs

    (tmp_path / "env.in").write_text("# python: 3.13 3.11\n# platforms: linux/amd64\ntqdm\n")
    inputs = requirements_inputs(tmp_path / "env.in")
    assert (inputs.platform, inputs.python) == ("universal: linux/amd64", "3.11 3.13")


def test_a_requirements_input_that_names_a_pytorch_build_takes_it_from_pytorchs_index(tmp_path):

    (tmp_path / "env.in").write_text("# comment\ntorch==2.13.0+cpu  # the CPU build\ntqdm>=4.60\n")
    inputs = requirements_inputs(tmp_path / "env.in")
    assert (inputs.requirements, inputs.torch_variant, inputs.python) == (
        ("torch==2.13.0+cpu", "tqdm>=4.60"),
        "cpu",
        "3.11 3.12 3.13",
    )
    assert inputs.torch_index == "https://download.pytorch.org/whl/cpu"
    assert inputs.platform == "universal: linux/amd64 linux/arm64 macos/arm64"
    (tmp_path / "plain.in").write_text("torch==2.13.0\n")
    assert requirements_inputs(tmp_path / "plain.in").torch_index is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "--extra-index-url https://mirror.example.com/simple\ntqdm\n",
            "env.in:1: --extra-index-url: only requirements belong here",
        ),
        ("# nothing\n", "env.in: no requirements in it"),
        ("tqdm>=4.60\nnumpy ==\n", "env.in:2: numpy ==: not a requirement (Expected "),
        ("# python: 3.10\ntqdm\n", "env.in:1: Python 3.10 is not supported: choose from 3.11, 3.12, 3.13"),
        ("tqdm\n# python: 3.12 3.14\n", "env.in:2: Python 3.14 is not supported: choose from 3.11, 3.12, 3.13"),
        (
            "# platforms: linux/amd64 windows/amd64\ntqdm\n",
            "env.in:1: platform windows/amd64 is not supported: choose from linux/amd64, linux/arm64, macos/arm64",
        ),
        ("# platforms:\ntqdm\n", "env.in:1: # platforms: name at least one"),
    ],
)
def test_a_requirements_input_holds_requirements_only(tmp_path, capsys, text, problem):
    (tmp_path / "env.in").write_text(text)
    code, out, err = envkit(capsys, "lock", "--requirements", str(tmp_path / "env.in"))
    assert (code, out) == (2, "") and err.startswith(f"envkit: error: {tmp_path}/{problem}") and err.count("\n") == 1
    assert not (tmp_path / "env.lock").exists()


def test_a_requirements_inputs_lock_envkit_wrote_is_locked_again_and_the_users_is_not(
    tmp_path, indexes, capsys, monkeypatch
):
    # Before: the user's-lock check knew only a target's mark, so `envkit lock --requirements dev.in` refused
    # requirements/dev.lock, the lock envkit itself had written (CI's host-lock tests failed).
    monkeypatch.setenv("UV_DEFAULT_INDEX", indexes[0].url)  # the installer's default index, here a local one
    (tmp_path / "env.in").write_text("tqdm\n")
    for _ in range(2):
        code, out, err = envkit(capsys, "lock", "--requirements", str(tmp_path / "env.in"))
        assert code == 0, err
    mine = "# pip-compile output, kept by hand\ntqdm==4.67.1\n"
    (tmp_path / "env.lock").write_text(mine)
    code, out, err = envkit(capsys, "lock", "--requirements", str(tmp_path / "env.in"))
    assert code == 2 and "is not a lock envkit wrote" in err and (tmp_path / "env.lock").read_text() == mine


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dev", "xla", "sky"])
def test_the_committed_host_locks_are_what_envkit_lock_resolves(tmp_path, repo_root, name):
    """Against the real default index (skips when unreachable, fails under ENVKIT_REQUIRE_INDEX=1)."""
    for suffix in (".in", ".lock"):
        shutil.copy(repo_root / "requirements" / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    done = subprocess.run(
        [sys.executable, "-m", "envkit", "lock", "--requirements", f"{name}.in"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo_root)},
    )
    if "cannot be reached" in done.stderr:
        environment_missing(
            f"the default package index is unreachable: {done.stderr.strip().splitlines()[-1]}", "ENVKIT_REQUIRE_INDEX"
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"unchanged {name}.lock (")


@pytest.mark.slow
@pytest.mark.parametrize("target", ["tpu-vm", "cuda"])
def test_the_committed_locks_are_what_envkit_lock_resolves(tmp_path, repo_root, target):
    """Against the real default index: relocking the repo's locked targets changes nothing
    (skips when the index cannot be reached, fails instead under ENVKIT_REQUIRE_INDEX=1)."""
    shutil.copy(repo_root / "envkit.yaml", tmp_path / "envkit.yaml")
    shutil.copytree(repo_root / "docker" / target, tmp_path / "docker" / target)
    # No engine: the base digest would be asked of Docker Hub, which tests must never reach.
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    done = subprocess.run(
        [sys.executable, "-m", "envkit", "lock", "--target", target],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    if "cannot be reached" in done.stderr:
        environment_missing(
            f"the default package index is unreachable: {done.stderr.strip().splitlines()[-1]}", "ENVKIT_REQUIRE_INDEX"
        )
    lock = (repo_root / "docker" / target / "requirements.lock").read_text()
    packages = len(re.findall(r"^[A-Za-z0-9]", lock, flags=re.MULTILINE))  # one requirement line each
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"unchanged docker/{target}/requirements.lock ({packages} packages)\n"


def test_base_image_may_carry_a_digest_and_apt_a_snapshot(tmp_path):
    digest = "sha256:" + "a" * 64
    config = write_project(
        tmp_path,
        "http://127.0.0.1:9/simple/",
        cpu={"base_image": f"python:3.11-slim-bookworm@{digest}", "apt_snapshot": "20251120T000000Z"},
    )
    target = load_config(config).target("cpu")
    assert (target.base_image, target.apt_snapshot) == (f"python:3.11-slim-bookworm@{digest}", "20251120T000000Z")
    assert load_config(config).target("tpu-vm").apt_snapshot is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"base_image": "python:3.11-slim-bookworm@sha256:abc"}, "base_image"),
        ({"base_image": "python:3.11@sha512:" + "a" * 128}, "base_image"),
        ({"apt_snapshot": "2025-11-20"}, "apt_snapshot"),
    ],
)
def test_malformed_digest_or_snapshot_is_one_line(tmp_path, capsys, change, field):
    config = write_project(tmp_path, "http://127.0.0.1:9/simple/", cpu=change)
    code, _, err = envkit(capsys, "lock", "--check", "--config", str(config))
    assert code == 2 and err.count("\n") == 1
    assert f": targets.cpu.{field}: " in err and " is not valid; allowed: " in err


def test_a_requirements_txt_is_a_requirements_input_and_a_lock_is_not(tmp_path, capsys):
    """Before: `envkit lock --requirements requirements.txt` was refused (a requirements input ends in .in)."""
    (tmp_path / "requirements.txt").write_text("tqdm>=4.60\n")
    assert requirements_inputs(tmp_path / "requirements.txt").requirements == ("tqdm>=4.60",)
    assert requirements_lock_path(tmp_path / "requirements.txt") == tmp_path / "requirements.lock"
    (tmp_path / "env.lock").write_text("tqdm==4.67.1\n")
    code, out, err = envkit(capsys, "lock", "--requirements", str(tmp_path / "env.lock"))
    assert (code, out) == (2, "") and err == (
        f"envkit: error: {tmp_path}/env.lock: this is a lock; give the requirements it is made from (a .in or .txt file)\n"
    )


def test_nvidias_pure_python_packages_are_no_sign_of_a_cuda_build():
    # dvclive pulls nvidia-ml-py (NVML's bindings) into any project's lock: a cpu lock holding it was "stale" as soon
    # as `envkit lock` wrote it, so `lock --check` could never pass there.
    locked = {"nvidia-ml-py": "13.580.82", "dvclive": "3.49.1", "nvidia-cublas-cu12": "12.8.4.1", "triton": "3.5.0"}
    assert cuda_only_packages(locked) == ["nvidia-cublas-cu12", "triton"]
    assert cuda_only_packages({"nvidia-ml-py": "13.580.82", "torch": "2.13.0"}) == []


def test_a_lock_file_of_the_users_is_never_overwritten(tmp_path, indexes, capsys):
    """Before: the user's own lock file where the cpu target's lock goes (a pip-compile output kept there) was
    written over by envkit lock --all, rc 0, though envkit never overwrites a file that lacks its mark."""
    pypi, pytorch = indexes
    config = write_project(tmp_path, pypi.url)
    mine = tmp_path / "docker" / "cpu" / "requirements.lock"
    mine.parent.mkdir(parents=True)
    mine.write_text("# pip-compile output, kept by hand\nnumpy==1.26.4\n")
    code, out, err = envkit(capsys, "lock", "--all", "--config", str(config), "--torch-index-url", pytorch.url)
    assert code == 2 and mine.read_text() == "# pip-compile output, kept by hand\nnumpy==1.26.4\n"
    assert [line for line in err.splitlines() if "warning: " not in line] == [  # the base digests: warnings
        f"envkit: error: {mine} is not a lock envkit wrote (it lacks the mark '# envkit lock for'): envkit "
        "lock never overwrites it; move it away, then lock again"
    ]
    assert sorted(out.splitlines()) == [  # the other targets are locked all the same
        "wrote docker/cuda/requirements.lock (6 packages)",
        "wrote docker/tpu-vm/requirements.lock (9 packages)",
    ]
    mine.unlink()
    assert envkit(capsys, "lock", "--all", "--config", str(config), "--torch-index-url", pytorch.url)[0] == 0


def test_a_lock_is_never_written_outside_the_project_through_a_link(tmp_path, indexes, capsys):
    """Issue 39 §18: with docker/cuda -> outside, `envkit lock --target cuda` wrote the lock there."""
    pypi, pytorch = indexes
    (tmp_path / "project" / "docker").mkdir(parents=True)
    config = write_project(tmp_path / "project", pypi.url)
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "project" / "docker" / "cuda").symlink_to(outside)
    code, out, err = envkit(
        capsys, "lock", "--target", "cuda", "--config", str(config), "--torch-index-url", pytorch.url
    )
    assert (code, out) == (2, "")
    assert err == (
        f"envkit: error: {tmp_path}/project/docker/cuda/requirements.lock is in {tmp_path}/project but a symbolic "
        f"link takes it to {outside}/requirements.lock, outside it: envkit writes only inside the project; replace "
        "the link with a folder, or write elsewhere with --output DIR\n"
    )
    assert list(outside.iterdir()) == []

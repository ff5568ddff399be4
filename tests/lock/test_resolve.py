"""envkit/lock/resolve.py's choice of versions: a lock holds releases unless a requirement names a pre-release
(pip's rule), against a local index (tests/wheel_index.py) shaped like hydra-core's: its release needs
antlr4-python3-runtime 4.9, which has a source distribution only, and its pre-release needs 4.11, which has a wheel.
"""

from __future__ import annotations

import pytest
from lock_project import envkit, lock_text, write_project

from envkit.lock.lockfile import read_lock


@pytest.fixture()
def hydra_index(indexes):
    pypi = indexes[0]
    pypi.add("hydra-core", "1.3.2", "antlr4-python3-runtime==4.9.*", "omegaconf<2.4,>=2.2")
    pypi.add("hydra-core", "1.4.0rc3", "antlr4-python3-runtime==4.11.*", "omegaconf>=2.4.0rc1")
    pypi.add("omegaconf", "2.3.0", "antlr4-python3-runtime==4.9.*")
    pypi.add("omegaconf", "2.4.1rc1", "antlr4-python3-runtime==4.11.*")
    pypi.add_sdist("antlr4-python3-runtime", "4.9.3")
    pypi.add("antlr4-python3-runtime", "4.11.1")
    pypi.add("solo", "0.1b1")  # a project with no release yet
    return pypi


def lock_tpu_vm(tmp_path, capsys, pypi, *packages: str) -> tuple[int, str, str]:
    config = write_project(tmp_path, pypi.url, **{"tpu-vm": {"pip_packages": list(packages)}})
    return envkit(capsys, "lock", "--target", "tpu-vm", "--config", str(config))


@pytest.mark.parametrize(
    ("requirement", "why", "instead"),
    [
        (
            "hydra-core>=1.3",
            "Because antlr4-python3-runtime==4.9.3 has no usable wheels",
            "hydra-core==1.4.0rc3, omegaconf==2.4.1rc1): name the pre-release to take it (e.g. hydra-core==1.4.0rc3)",
        ),
        (
            "solo<1",
            "Because there is no version of solo",
            "solo==0.1b1): name the pre-release to take it (e.g. solo==0.1b1)",
        ),
    ],
)
def test_a_pre_release_no_requirement_names_is_refused_in_one_line(
    tmp_path, capsys, hydra_index, requirement, why, instead
):
    """Issue 40 §16: a user's lock held hydra-core==1.4.0rc3 and omegaconf==2.4.1rc1 where pip chooses releases:
    uv's default strategy falls back to a pre-release once every release is rejected, and hydra-core 1.3.2's
    antlr4-python3-runtime has no wheel to lock. pip takes a pre-release only where a requirement names one."""
    code, out, err = lock_tpu_vm(tmp_path, capsys, hydra_index, requirement)
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith(
        "envkit: error: target tpu-vm: its releases do not resolve, and a lock holds a pre-release only where a "
        "requirement names one (pip's rule): "
    )
    assert why in line and instead in line
    assert not (tmp_path / "docker" / "tpu-vm" / "requirements.lock").exists()


def test_a_requirement_that_names_a_pre_release_gets_it_and_the_pre_releases_its_dependencies_name(
    tmp_path, capsys, hydra_index
):
    code, out, err = lock_tpu_vm(tmp_path, capsys, hydra_index, "hydra-core==1.4.0rc3")
    assert code == 0, err
    lock = read_lock(tmp_path / "docker" / "tpu-vm" / "requirements.lock")
    # omegaconf's pre-release is named by hydra-core 1.4.0rc3's own requirement (omegaconf>=2.4.0rc1), as pip takes it.
    assert {name: lock.packages[name] for name in ("hydra-core", "omegaconf", "antlr4-python3-runtime")} == {
        "hydra-core": "1.4.0rc3",
        "omegaconf": "2.4.1rc1",
        "antlr4-python3-runtime": "4.11.1",
    }
    assert "--prerelease explicit --prerelease-package omegaconf=if-necessary" in lock_text(
        tmp_path / "envkit.yaml", "tpu-vm"
    )


def test_a_release_whose_dependencies_have_wheels_is_locked_over_a_newer_pre_release(tmp_path, capsys, hydra_index):
    hydra_index.add("antlr4-python3-runtime", "4.9.3")
    code, _, err = lock_tpu_vm(tmp_path, capsys, hydra_index, "hydra-core>=1.3")
    assert code == 0, err
    lock = read_lock(tmp_path / "docker" / "tpu-vm" / "requirements.lock")
    assert (lock.packages["hydra-core"], lock.packages["omegaconf"]) == ("1.3.2", "2.3.0")
    assert "--prerelease" not in lock_text(tmp_path / "envkit.yaml", "tpu-vm")


def test_a_lock_holding_a_pre_release_no_requirement_names_any_more_is_relocked_to_releases(
    tmp_path, capsys, hydra_index
):
    """The previous lock is uv's preference: the pre-release it holds must not survive a relock once nothing asks
    for it (the user's lock of issue 40 §16, relocked)."""
    assert lock_tpu_vm(tmp_path, capsys, hydra_index, "hydra-core==1.4.0rc3")[0] == 0
    hydra_index.add("antlr4-python3-runtime", "4.9.3")
    code, out, err = lock_tpu_vm(tmp_path, capsys, hydra_index, "hydra-core>=1.3")
    assert (code, out) == (0, "wrote docker/tpu-vm/requirements.lock (12 packages)\n"), err
    lock = read_lock(tmp_path / "docker" / "tpu-vm" / "requirements.lock")
    assert (lock.packages["hydra-core"], lock.packages["omegaconf"]) == ("1.3.2", "2.3.0")

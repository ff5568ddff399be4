"""Where envkit reproduce runs an image run again (issue 43 §2): by digest, else a rebuild proved the same, else a
host venv; each choice said, and a record that cannot promise the same environment refused in one line."""

from __future__ import annotations

import hashlib

import pytest

from envkit.errors import EnvkitError
from envkit.image.inventory import Inventory
from envkit.image.pushed import Pushed, record
from envkit.project.load import load_config
from envkit.runs.reproduce_image import PULL, REBUILD, VENV, choose, proof

CONFIG = """experiments:
  train:
    summary: train.py
    command: [python, train.py]
    targets: [cpu]
targets:
  cpu:
    kind: cpu
    torch: "2.14.1"
    python: "3.11"
"""
LOCK = "# envkit lock\ntabulate==0.9.0 \\\n    --hash=sha256:" + "a" * 64 + "\n"
IMAGE_ID = "sha256:" + "1" * 64
DIGEST = "sha256:" + "2" * 64


@pytest.fixture
def config(tmp_path):
    (tmp_path / "envkit.yaml").write_text(CONFIG)
    (tmp_path / "docker" / "cpu").mkdir(parents=True)
    (tmp_path / "docker" / "cpu" / "requirements.lock").write_text(LOCK)
    return load_config(tmp_path / "envkit.yaml")


def environment(**changes) -> dict:
    """An image run's environment as its record holds it."""
    lock = hashlib.sha256(LOCK.encode()).hexdigest()
    return {"image": "envkit-cpu:latest", "image_id": IMAGE_ID, "image_digest": None, "lock_sha256": lock, **changes}


def test_a_push_of_the_recorded_image_is_pulled_by_digest(config):
    record(config.root / "docker" / "cpu", "cpu", [Pushed("reg.example:5000/envkit-cpu", "latest", DIGEST, IMAGE_ID)])
    choice = choose(environment(), config, "cpu", engine=True)
    assert (choice.how, choice.reference) == (PULL, f"reg.example:5000/envkit-cpu@{DIGEST}")
    assert choice.said == f"the recorded image by digest: reg.example:5000/envkit-cpu@{DIGEST}"
    by_name = choose(environment(image=f"other/envkit-cpu@{DIGEST}"), config, "cpu", engine=True)
    assert by_name.reference == f"other/envkit-cpu@{DIGEST}"


def test_without_a_push_the_lock_at_the_revision_is_rebuilt(config):
    record(config.root / "docker" / "cpu", "cpu", [Pushed("reg/envkit-cpu", "v1", DIGEST, "sha256:" + "9" * 64)])
    choice = choose(environment(), config, "cpu", engine=True)
    assert (choice.how, choice.lock) == (REBUILD, config.root / "docker" / "cpu" / "requirements.lock")


def test_without_an_engine_a_host_venv_is_made_from_the_lock_and_says_so(config):
    record(config.root / "docker" / "cpu", "cpu", [Pushed("reg/envkit-cpu", "latest", DIGEST, IMAGE_ID)])
    choice = choose(environment(), config, "cpu", engine=False)
    assert choice.how == VENV
    assert choice.said.startswith("no Docker engine here: a host venv from the lock ")
    assert choice.said.endswith(f"(its push is not pulled without an engine: reg/envkit-cpu@{DIGEST})")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"lock_sha256": None}, "was built unlocked and no push of it is known here: reproduce cannot promise"),
        ({"lock_sha256": "b" * 64}, "the record ran on lock bbbbbbbbbbbb, but at its revision its lock is "),
    ],
)
def test_a_record_of_another_or_no_lock_cannot_promise_the_environment(config, changes, expected):
    with pytest.raises(EnvkitError, match=expected) as refused:
        choose(environment(**changes), config, "cpu", engine=True)
    assert "\n" not in str(refused.value)


def test_a_target_unlocked_at_the_revision_is_refused(config):
    (config.root / "docker" / "cpu" / "requirements.lock").unlink()
    with pytest.raises(EnvkitError, match=r"at its revision it has no lock \(docker/cpu/requirements.lock\)"):
        choose(environment(), config, "cpu", engine=False)


def test_a_rebuild_is_proved_by_the_python_packages_the_record_lists():
    recorded = environment(distributions=["tabulate==0.9.0", "torch==2.14.1"])
    assert proof(Inventory("rebuilt", python={"tabulate": "0.9.0", "torch": "2.14.1"}), recorded) == ()
    differences = proof(Inventory("rebuilt", python={"tabulate": "0.8.0", "torch": "2.14.1"}), recorded)
    assert differences == ("python packages: tabulate: 0.9.0 -> 0.8.0",)

"""The MNIST recipe's XLA paths on XLA:CPU (PJRT_DEVICE=CPU) in the torch_xla environment.

Collectives across spawned replicas hang on XLA:CPU, so the one-process-per-core
path runs at world size 1; SPMD is what runs over 2 CPU devices, checked against
single-device training.
"""

from __future__ import annotations

import pytest
import torch
from mnist_files import checkpoint_weights, read_results, run_mnist, write_mnist
from xla_env import xla_python


def needs_xla(test):
    return pytest.mark.slow(pytest.mark.xla(test))


FAKE = ("--dataset", "fake", "--fake-train-size", "256", "--fake-test-size", "128", "--quiet")


@pytest.fixture(scope="module")
def python() -> str:
    return xla_python()


def run_xla(python: str, *args, devices: int = 1):
    """Run the recipe on ``devices`` XLA:CPU devices; assert it succeeded."""
    done = run_mnist(*args, python=python, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(devices)})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@needs_xla
def test_single_core_trains_without_recompiling(python, tmp_path):
    data = write_mnist(tmp_path / "data", train_count=256, test_count=128)
    run_xla(
        python,
        "--device",
        "tpu",
        "--cores",
        "1",
        "--data-dir",
        data,
        "--no-download",
        "--results-dir",
        tmp_path,
        "--epochs",
        "3",
        "--per-device-batch",
        "32",
        "--quiet",
    )
    results = read_results(tmp_path, "tpu")
    metrics = results["metrics"]
    assert metrics["epoch_loss"][-1] < metrics["epoch_loss"][0]
    # Every graph is compiled in the first epoch; later epochs reuse them.
    first, *later = metrics["xla_compilations_per_epoch"]
    assert first > 0 and later == [first] * len(later)
    assert results["configuration"]["strategy"] == "single" and results["configuration"]["cores"] == 1
    assert results["environment"]["device_name"] == "XLA:CPU"
    assert results["environment"]["torch_xla"] is not None


@needs_xla
@pytest.mark.parametrize(
    ("strategy", "devices", "run_name"), [("single", 1, "tpu"), ("xmp", 1, "tpu-x1-xmp"), ("spmd", 2, "tpu-x2-spmd")]
)
def test_no_graph_is_compiled_after_the_first_epoch(python, tmp_path, strategy, devices, run_name):
    """At E1's learning rate, 1.0 at a global batch of 128, decaying to 0.7 after epoch 1. torch_xla bakes the
    scalars 0 and ±1 into a graph as constants, so the step compiled again in epoch 2 ([4, 5, 5]) until the
    recipe set XLA_NO_SPECIAL_SCALARS."""
    run_xla(
        python,
        "--device",
        "tpu",
        "--strategy",
        strategy,
        *FAKE,
        "--epochs",
        "3",
        "--global-batch",
        "128",
        "--results-dir",
        tmp_path,
        devices=devices,
    )
    results = read_results(tmp_path, run_name)
    assert results["settings"]["effective_lr"] == 1.0
    first, *later = results["metrics"]["xla_compilations_per_epoch"]
    assert first > 0 and later == [first, first], results["metrics"]["xla_compilations_per_epoch"]


@needs_xla
def test_multi_core_path_runs_at_world_size_one(python, tmp_path):
    run_xla(
        python,
        "--device",
        "tpu",
        "--cores",
        "all",
        *FAKE,
        "--results-dir",
        tmp_path,
        "--epochs",
        "2",
        "--per-device-batch",
        "64",
    )
    results = read_results(tmp_path, "tpu-x1-xmp")
    assert results["configuration"]["strategy"] == "xmp" and results["configuration"]["world_size"] == 1
    assert results["metrics"]["epochs_completed"] == 2 and results["metrics"]["steps"] == 8
    # It learned: above chance (1 in 10 digits) on the 128 test images, and the loss fell (seed 0: 30 of 128 right).
    accuracy = results["metrics"]["test_accuracy"]
    assert accuracy > 0.15 and (accuracy * 128).is_integer(), accuracy
    assert results["metrics"]["epoch_loss"][-1] < results["metrics"]["epoch_loss"][0]


@needs_xla
def test_spmd_over_two_devices_matches_one_device(python, tmp_path):
    common_args = ("--device", "tpu", *FAKE, "--epochs", "1", "--global-batch", "64")
    run_xla(python, *common_args, "--strategy", "xmp", "--results-dir", tmp_path / "one")
    run_xla(python, *common_args, "--strategy", "spmd", "--results-dir", tmp_path / "two", devices=2)
    one, two = read_results(tmp_path / "one", "tpu-x1-xmp"), read_results(tmp_path / "two", "tpu-x2-spmd")
    assert two["configuration"]["world_size"] == 2 and two["configuration"]["per_device_batch"] == 32
    assert two["settings"]["effective_lr"] == one["settings"]["effective_lr"]
    assert two["metrics"]["final_loss"] == pytest.approx(one["metrics"]["final_loss"], rel=1e-5)
    weights_one, weights_two = (
        checkpoint_weights(tmp_path / "one", "tpu-x1-xmp"),
        checkpoint_weights(tmp_path / "two", "tpu-x2-spmd"),
    )
    for name, tensor in weights_one.items():
        torch.testing.assert_close(weights_two[name], tensor, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")  # noqa: B023 - called at once


@needs_xla
def test_xla_run_resumes_from_its_checkpoint(python, tmp_path):
    args = ("--device", "tpu", *FAKE, "--per-device-batch", "64", "--results-dir", tmp_path)
    run_xla(python, *args, "--epochs", "1")
    run_xla(python, *args, "--epochs", "2", "--resume")
    resumed = read_results(tmp_path, "tpu-2")
    assert resumed["settings"]["resumed_from_epoch"] == 1
    assert resumed["metrics"]["epochs_completed"] == 2 and resumed["timing"]["epoch_s"]["n"] == 2
    assert resumed["metrics"]["epoch_loss"][0] == read_results(tmp_path, "tpu")["metrics"]["epoch_loss"][0]


@needs_xla
def test_bad_input_on_xla_paths_is_one_line_and_exit_2(python, tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "mnist-tpu-x1-xmp.pt").write_bytes(b"not a checkpoint")
    cases = [
        # Raised inside the replica process that torch_xla.launch started.
        ((*FAKE, "--cores", "all", "--resume", "--results-dir", tmp_path), 1, "is corrupt or unreadable"),
        (
            (*FAKE, "--strategy", "spmd", "--global-batch", "3", "--results-dir", tmp_path),
            2,
            "--global-batch 3 does not divide over 2 replicas",
        ),
    ]
    for args, devices, expected in cases:
        done = run_mnist(
            "--device", "tpu", *args, python=python, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(devices)}
        )
        assert done.returncode == 2, done.stderr[-2000:]
        errors = [line for line in done.stderr.splitlines() if line.startswith("mnist.py: error: ")]
        assert len(errors) == 1 and expected in errors[0], done.stderr[-2000:]
        assert "Traceback" not in done.stderr
    assert not list(tmp_path.glob("*.json"))


def test_missing_torch_xla_interpreter_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("ENVKIT_XLA_PYTHON", str(tmp_path / "no-python"))
    monkeypatch.setenv("ENVKIT_REQUIRE_XLA", "1")
    with pytest.raises(pytest.fail.Exception, match="ENVKIT_REQUIRE_XLA=1 but no XLA interpreter at"):
        xla_python()
    monkeypatch.setenv("ENVKIT_REQUIRE_XLA", "0")
    with pytest.raises(pytest.skip.Exception, match="no XLA interpreter at"):
        xla_python()

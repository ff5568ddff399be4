"""The MNIST recipe on eager CPU: training on MNIST's on-disk format, results, resume, bad input."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import harness
import mnist
import pytest
import torch
from mnist_files import RECIPE, checkpoint_weights, read_results, run_mnist, write_mnist

from envkit.runs.results import load_results, recipe_series
from envkit.support import provenance_facts

TINY = ("--per-device-batch", "32", "--quiet", "--no-download")

RESULT_KEYS = {
    "schema_version",
    "recipe",
    "run_name",
    "started_at",
    "settings",
    "configuration",
    "timing",
    "metrics",
    "series",
    "environment",
    "run_id",
    "run",
    "threads",
}
CONFIGURATION_KEYS = {
    "device",
    "cores",
    "strategy",
    "parallel",
    "world_size",
    "model",
    "global_batch",
    "per_device_batch",
    "image_size",
    "dataset",
}
ENVIRONMENT_KEYS = {
    "host",
    "device_type",
    "device_name",
    "device_count",
    "python",
    "torch",
    "torchvision",
    "torch_xla",
    "torch_cuda_build",
    "image",
    "git_revision",
}
STAT_KEYS = {"mean", "std", "n"}


@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory) -> Path:
    return write_mnist(tmp_path_factory.mktemp("data"), train_count=256, test_count=128)


@pytest.fixture(scope="module")
def trained(mnist_dir, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One two-epoch run on the on-disk dataset, shared by the tests that inspect it."""
    results = tmp_path_factory.mktemp("results")
    done = run_mnist(
        "--data-dir",
        mnist_dir,
        "--results-dir",
        results,
        "--epochs",
        "2",
        *TINY,
        env={"ENVKIT_IMAGE": "envkit-cpu:test", "ENVKIT_REVISION": "abc1234", "ENVKIT_RESULTS_DIR": str(results)},
        wrapped=True,  # as run.sh starts it: the wrapper adds the process's facts to the recipe's record
    )
    assert done.returncode == 0, done.stderr
    return results, done


def test_loss_falls_on_mnist_files(trained):
    results, _ = trained
    metrics = read_results(results, "cpu")["metrics"]
    assert metrics["epoch_loss"][1] < metrics["epoch_loss"][0]
    assert metrics["final_loss"] == metrics["epoch_loss"][-1]
    assert metrics["test_accuracy"] > 0.5  # ten classes: chance is 0.1
    assert metrics["steps"] == 2 * (256 // 32)


def test_results_json_has_every_contract_key(trained):
    results, done = trained
    document = read_results(results, "cpu")
    assert set(document) == RESULT_KEYS
    assert document["recipe"] == "mnist" and document["run_name"] == "cpu" and document["schema_version"] == 3
    assert CONFIGURATION_KEYS <= set(document["configuration"])
    assert document["configuration"] == {
        "device": "cpu",
        "cores": None,
        "strategy": None,
        "parallel": None,
        "world_size": 1,
        "model": "mnist-net",
        "global_batch": 32,
        "per_device_batch": 32,
        "image_size": 28,
        "dataset": "real",
        "nodes": 1,
        "processes_per_node": 1,
        "backend": None,
    }
    assert ENVIRONMENT_KEYS <= set(document["environment"])
    # One process on the CPU: every CPU the run may use, as the threads the record says it used.
    assert document["threads"] == {
        "budget": len(os.sched_getaffinity(0)),
        "budget_from": "cpus",  # no OMP_NUM_THREADS given
        "processes": 1,
        "per_process": len(os.sched_getaffinity(0)),
    }
    assert document["environment"]["image"] == "envkit-cpu:test"
    assert document["environment"]["git_revision"] == "abc1234"
    # the wrapper's facts, the harness's not written: torch's distribution and the CPU's model as it looks them up
    assert document["environment"]["torch"] == provenance_facts.installed()["torch"]
    assert document["environment"]["device_name"] == provenance_facts.device_name("cpu")
    timing = document["timing"]
    assert timing["total_s"] >= timing["epoch_s"]["mean"] * 2 > 0
    assert timing["first_epoch_s"] > 0
    for key in ("iter_s", "epoch_s", "train_epoch_s", "test_epoch_s"):
        assert set(timing[key]) == STAT_KEYS
    assert timing["iter_s"]["n"] == 16 and timing["epoch_s"]["n"] == 2
    settings = document["settings"]
    assert settings["lr"] == 1.0 and settings["effective_lr"] == 0.25  # linear scaling: 1.0 x 32/128
    assert settings["gamma"] == 0.7 and settings["epochs"] == 2 and settings["run_name"] == "cpu"
    assert "test accuracy" in done.stdout and done.stderr == ""  # --quiet: no progress bars


def test_the_record_carries_a_commands_core(trained):
    """metrics, series and timing as any command's record has them (envkit/data/results.schema.json, which
    read_results checks the record against): the series per epoch, named as envkit names an older record's lists,
    and envkit reads the series the recipe wrote."""
    results, _ = trained
    document = read_results(results, "cpu")
    metrics, series = document["metrics"], document["series"]
    assert set(series) == {"loss", "test_accuracy", "epoch_s"}
    assert series["loss"] == {"step": [1, 2], "value": metrics["epoch_loss"]}
    assert series["test_accuracy"] == {"step": [1, 2], "value": metrics["epoch_test_accuracy"]}
    assert series["test_accuracy"]["value"][-1] == metrics["test_accuracy"]
    epochs = series["epoch_s"]["value"]
    assert series["epoch_s"]["step"] == [1, 2] and epochs[0] == document["timing"]["first_epoch_s"]
    assert sum(epochs) / len(epochs) == pytest.approx(document["timing"]["epoch_s"]["mean"])
    assert recipe_series(metrics).items() <= series.items()
    (run,), _ = load_results(results)
    assert run.series == series


def test_checkpoint_written_each_epoch_holds_the_state(trained):
    results, _ = trained
    state = harness.checkpoints.load_checkpoint(results / "checkpoints" / "mnist-cpu.pt")
    assert state["epoch"] == 2 and state["sampler_epoch"] == 2
    assert set(state["model"]) == set(mnist.Net().state_dict())
    assert state["scheduler"]["last_epoch"] == 2
    assert len(state["history"]["epoch_s"]) == 2


def test_second_run_with_same_name_keeps_the_first_results(trained, mnist_dir):
    results, _ = trained
    first = (results / "mnist-cpu.json").read_bytes()
    mnist.main(
        ["--data-dir", str(mnist_dir), "--results-dir", str(results), "--epochs", "1", "--max-steps", "1", *TINY]
    )
    assert (results / "mnist-cpu.json").read_bytes() == first
    assert read_results(results, "cpu-2")["run_name"] == "cpu-2"


def test_fake_dataset_is_deterministic_and_learnable():
    (train_x, train_y), (test_x, _) = (
        (dataset.tensors[0], dataset.tensors[1])
        for dataset in mnist.load_data(
            mnist.parse_args(["--dataset", "fake", "--fake-train-size", "64", "--fake-test-size", "32"])
        )
    )
    again = mnist.load_data(
        mnist.parse_args(["--dataset", "fake", "--fake-train-size", "64", "--fake-test-size", "32"])
    )
    assert torch.equal(train_x, again[0].tensors[0]) and torch.equal(train_y, again[0].tensors[1])
    assert train_x.shape == (64, 1, 28, 28) and test_x.shape == (32, 1, 28, 28)
    other_seed = mnist.load_data(mnist.parse_args(["--dataset", "fake", "--fake-train-size", "64", "--seed", "1"]))
    assert not torch.equal(train_x, other_seed[0].tensors[0][:64])
    # Learnable: images of one class are closer to each other than to another class.
    same = (train_x[train_y == train_y[0]] - train_x[0]).pow(2).mean()
    different = (train_x[train_y != train_y[0]] - train_x[0]).pow(2).mean()
    assert same < different


def test_learning_rate_schedule_is_step_lr_without_warmup_and_ramps_with_it():
    def lrs(warmup: int) -> list[float]:
        optimizer = torch.optim.Adadelta([torch.zeros(1, requires_grad=True)], lr=2.0)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, harness.WarmupThenDecay(warmup, 0.5))
        rates = []
        for _ in range(5):
            rates.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        return rates

    assert lrs(0) == [2.0, 1.0, 0.5, 0.25, 0.125]  # StepLR(step_size=1, gamma=0.5)
    assert lrs(3) == [0.5, 1.0, 1.5, 2.0, 1.0]


def test_max_steps_stops_early(mnist_dir, tmp_path):
    mnist.main(
        ["--data-dir", str(mnist_dir), "--results-dir", str(tmp_path), "--epochs", "5", "--max-steps", "3", *TINY]
    )
    metrics = read_results(tmp_path, "cpu")["metrics"]
    assert metrics["steps"] == 3 and metrics["epochs_completed"] == 1


def test_resumed_run_equals_uninterrupted_run(mnist_dir, tmp_path):
    args = ["--data-dir", str(mnist_dir), "--seed", "5", "--per-device-batch", "64", "--quiet", "--no-download"]
    mnist.main([*args, "--results-dir", str(tmp_path / "full"), "--epochs", "2"])
    mnist.main([*args, "--results-dir", str(tmp_path / "split"), "--epochs", "1"])
    mnist.main([*args, "--results-dir", str(tmp_path / "split"), "--epochs", "2", "--resume"])
    full, split = checkpoint_weights(tmp_path / "full", "cpu"), checkpoint_weights(tmp_path / "split", "cpu")
    assert all(torch.equal(full[name], split[name]) for name in full)
    resumed = read_results(tmp_path / "split", "cpu-2")
    assert resumed["metrics"]["epoch_loss"] == read_results(tmp_path / "full", "cpu")["metrics"]["epoch_loss"]
    assert resumed["settings"]["resumed_from_epoch"] == 1


@pytest.mark.slow
def test_killed_run_resumes_to_bit_identical_weights(tmp_path):
    data = write_mnist(tmp_path / "data", train_count=512, test_count=64)
    args = ("--data-dir", data, "--epochs", "3", "--per-device-batch", "16", "--seed", "3", "--quiet", "--no-download")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # two runs side by side on a shared machine
    uninterrupted = subprocess.Popen(
        [sys.executable, RECIPE, *map(str, args), "--results-dir", tmp_path / "full"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    killed = subprocess.Popen(
        [sys.executable, RECIPE, *map(str, args), "--results-dir", tmp_path / "killed"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first_checkpoint = tmp_path / "killed" / "checkpoints" / "mnist-cpu.pt"
    deadline = time.monotonic() + 120
    while not first_checkpoint.exists() and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    killed.send_signal(signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL, "the run ended before it could be killed"
    assert harness.checkpoints.load_checkpoint(first_checkpoint)["epoch"] == 1
    assert not (tmp_path / "killed" / "mnist-cpu.json").exists()

    resumed = run_mnist(*args, "--results-dir", tmp_path / "killed", "--resume", env={"OMP_NUM_THREADS": "1"})
    assert resumed.returncode == 0, resumed.stderr
    assert uninterrupted.wait(timeout=300) == 0, uninterrupted.stderr.read()

    full, after_kill = checkpoint_weights(tmp_path / "full", "cpu"), checkpoint_weights(tmp_path / "killed", "cpu")
    assert all(torch.equal(full[name], after_kill[name]) for name in full)
    full_results, resumed_results = read_results(tmp_path / "full", "cpu"), read_results(tmp_path / "killed", "cpu")
    assert resumed_results["metrics"]["epoch_loss"] == full_results["metrics"]["epoch_loss"]
    assert resumed_results["metrics"]["test_accuracy"] == full_results["metrics"]["test_accuracy"]
    assert resumed_results["settings"]["resumed_from_epoch"] == 1
    assert resumed_results["timing"]["epoch_s"]["n"] == 3  # the first segment's epochs are reported too


def test_resume_refuses_other_settings(mnist_dir, tmp_path, capsys):
    (tmp_path / "checkpoints").mkdir()
    harness.checkpoints.save_checkpoint(
        tmp_path / "checkpoints" / "mnist-cpu.pt",
        {
            "epoch": 1,
            "training_settings": {**dict.fromkeys(mnist.RESUME_KEYS), "lr": 9.0},
        },
    )
    code, message = _exit_of(
        ["--data-dir", str(mnist_dir), "--results-dir", str(tmp_path), "--resume", "--epochs", "2"], capsys
    )
    assert code == 2 and "cannot resume" in message and "lr: 9.0 in the checkpoint, 1.0 now" in message


def _exit_of(argv: list[str], capsys) -> tuple[int, str]:
    """Run the recipe's entry point in this process: (exit status, stderr)."""
    with pytest.raises(SystemExit) as exited:
        harness.run_recipe(mnist.PROG, lambda: mnist.main(argv))
    return exited.value.code, capsys.readouterr().err


def _corrupt_checkpoint(tmp_path: Path) -> list[str]:
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "mnist-cpu.pt").write_bytes(b"PK\x03\x04 half a zip file")
    return ["--dataset", "fake", "--results-dir", str(tmp_path), "--resume"]


BAD_ARGUMENTS = {
    "unknown device": (lambda tmp: ["--device", "gpu"], "argument --device: invalid choice: 'gpu'"),
    "cores with cpu": (lambda tmp: ["--device", "cpu", "--cores", "1"], "--cores applies to --device tpu only"),
    "strategy with cuda": (
        lambda tmp: ["--device", "cuda", "--strategy", "spmd"],
        "--strategy applies to --device tpu only",
    ),
    "zero epochs": (lambda tmp: ["--epochs", "0"], "argument --epochs: expected a positive integer, got '0'"),
    "negative epochs": (lambda tmp: ["--epochs", "-3"], "argument --epochs: expected a positive integer, got '-3'"),
    "zero batch": (lambda tmp: ["--per-device-batch", "0"], "argument --per-device-batch: expected a positive integer"),
    "both batches": (lambda tmp: ["--per-device-batch", "8", "--global-batch", "8"], "not allowed with argument"),
    "bad lr": (lambda tmp: ["--lr", "nan"], "argument --lr: expected a positive number, got 'nan'"),
    "negative warm-up": (lambda tmp: ["--warmup-epochs", "-1"], "argument --warmup-epochs: expected an integer >= 0"),
    "bad run name": (lambda tmp: ["--run-name", "../x"], "--run-name '../x' is not allowed"),
    "missing data, no download": (
        lambda tmp: ["--data-dir", str(tmp / "nowhere"), "--no-download", "--results-dir", str(tmp)],
        "is not under",
    ),
    "corrupt checkpoint": (_corrupt_checkpoint, "is corrupt or unreadable"),
    "batch bigger than the data": (
        lambda tmp: [
            "--dataset",
            "fake",
            "--fake-train-size",
            "8",
            "--per-device-batch",
            "16",
            "--results-dir",
            str(tmp),
        ],
        "no training step: 8 training images per data shard is less than one batch of 16",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_bad_input_is_one_line_and_exit_2(case, tmp_path, capsys):
    make_argv, expected = BAD_ARGUMENTS[case]
    code, message = _exit_of(make_argv(tmp_path), capsys)
    assert code == 2
    assert message.startswith("mnist.py: error: ") and message.count("\n") == 1, message
    assert expected in message
    assert not list(tmp_path.glob("mnist-*.json"))


def test_failed_download_is_a_clear_error(tmp_path, capsys, monkeypatch):
    from torchvision.datasets import MNIST

    def unreachable(self):
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz:\nTried https://example.invalid/")

    monkeypatch.setattr(MNIST, "download", unreachable)
    code, message = _exit_of(["--data-dir", str(tmp_path / "empty"), "--results-dir", str(tmp_path)], capsys)
    assert code == 2 and message.count("\n") == 1
    assert f"MNIST is not under {tmp_path / 'empty'}/MNIST/raw and the download failed (Error downloading" in message


def test_progress_bar_unless_quiet(mnist_dir, tmp_path, capsys):
    args = [
        "--data-dir",
        str(mnist_dir),
        "--no-download",
        "--results-dir",
        str(tmp_path),
        "--max-steps",
        "2",
        "--per-device-batch",
        "32",
        "--log-every",
        "1",
    ]
    mnist.main(args)
    shown = capsys.readouterr()
    assert "epoch 1/10" in shown.err and "loss=" in shown.err
    mnist.main([*args, "--quiet"])
    quiet = capsys.readouterr()
    assert quiet.err == "" and "test accuracy" in quiet.out


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is visible here")
def test_cuda_without_gpu_is_a_clear_error(capsys):
    code, message = _exit_of(["--device", "cuda", "--dataset", "fake"], capsys)
    assert code == 2 and "--device cuda: no CUDA GPU is visible" in message


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="torch_xla is installed here")
def test_tpu_without_torch_xla_is_a_clear_error(capsys):
    code, message = _exit_of(["--device", "tpu"], capsys)
    assert code == 2 and "--device tpu needs a TPU backend (torch_xla or torch_tpu)" in message


BLOCK_AND_RUN = """
import runpy, sys
for name in ("envkit", "torchvision", "torch_xla"):
    sys.modules[name] = None  # import now fails, as in the cpu image
sys.argv = sys.argv[1:]
sys.path.insert(0, sys.argv[0].rpartition("/")[0])  # what 'python recipes/mnist.py' does
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_fake_data_needs_neither_torchvision_nor_envkit(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            BLOCK_AND_RUN,
            str(RECIPE),
            "--dataset",
            "fake",
            "--max-steps",
            "2",
            "--fake-train-size",
            "256",
            "--fake-test-size",
            "64",
            "--results-dir",
            str(tmp_path),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert read_results(tmp_path, "cpu")["environment"]["torch_xla"] is None


def test_real_data_without_torchvision_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.delitem(sys.modules, "torchvision.datasets", raising=False)
    code, message = _exit_of(["--data-dir", str(tmp_path), "--results-dir", str(tmp_path)], capsys)
    assert code == 2 and "--dataset real needs torchvision, which is not installed here; use --dataset fake" in message


def test_script_entry_point_reports_bad_input_without_traceback(tmp_path):
    done = run_mnist("--device", "cpu", "--cores", "all", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == "mnist.py: error: --cores applies to --device tpu only; --device cpu trains on one device\n"


def test_missing_tqdm_is_one_line_and_exit_2(tmp_path):
    block = BLOCK_AND_RUN.replace('("envkit", "torchvision", "torch_xla")', '("envkit", "tqdm")')
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            block,
            str(RECIPE),
            "--dataset",
            "fake",
            "--max-steps",
            "1",
            "--results-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert (
        done.stderr
        == "mnist.py: error: a progress bar needs tqdm, which is not installed here; use --quiet, or pip install tqdm\n"
    )
    assert not list(tmp_path.glob("*.json"))

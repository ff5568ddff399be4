"""recipes/cifar.py on CPU: arguments, CIFAR-10's file format, DataParallel, --show-scatter, resume, presets.

Runs use 32 px images and a few dozen images so the whole file stays fast; the
multi-process DDP runs are in test_cifar_ddp.py (slow).
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import cifar
import harness
import pytest
import scatter
import torch
from cifar_files import write_cifar10

RECIPE = Path(cifar.__file__)
TINY = [
    "--dataset",
    "fake",
    "--image-size",
    "32",
    "--global-batch",
    "16",
    "--lr",
    "0.02",
    "--fake-train-size",
    "32",
    "--fake-test-size",
    "21",
    "--quiet",
]


def run_recipe(argv: list[str]) -> None:
    """Run the recipe in this process exactly as its ``__main__`` does (SystemExit(2) on bad input)."""
    harness.run_recipe(cifar.PROG, lambda: cifar.main(argv))


def results_of(directory: Path) -> list[dict]:
    return [assert_valid_results(path) for path in sorted(directory.glob("cifar-*.json"))]


def bad_input_line(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        run_recipe(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cifar.py: error: "), err
    return err


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--model", "vgg16"], "argument --model: invalid choice: 'vgg16'"),
        (["--parallel", "ddp", "--nproc", "1"], "--parallel ddp needs at least 2 devices, got 1"),
        (["--device", "cuda", "--gpus", "1,two"], "--gpus '1,two' is not a comma-separated list of GPU ids"),
        (["--device", "cuda", "--gpus", "0,-1"], "--gpus '0,-1' is not a comma-separated list of GPU ids"),
        (["--device", "cuda", "--gpus", "1,1"], "--gpus '1,1' names a GPU twice"),
        (
            ["--parallel", "ddp", "--nproc", "3", "--global-batch", "256"],
            "--global-batch 256 does not divide over 3 replicas",
        ),
        (["--gpus", "0"], "--gpus applies to --device cuda only"),
        (["--nproc", "2"], "--nproc applies to --device cpu with --parallel ddp"),
        (["--epochs", "2", "--warmup-epochs", "2"], "--warmup-epochs 2 leaves no epoch for the decay"),
        (["--pin-memory"], "--pin-memory speeds up copies to a GPU only"),
        (
            ["--parallel", "dp"],
            "--parallel dp needs CUDA GPUs (nn.DataParallel splits each batch over them), and --device "
            "cpu has none; use --parallel ddp for several processes, or none",
        ),
        (["--image-size", "0"], "argument --image-size: expected a positive integer, got '0'"),
        (["--run-name", "../x"], "--run-name '../x' is not allowed"),
        (["--device", "tpu"], "--device tpu is not supported by the cifar recipe"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(capsys, monkeypatch, argv, expected):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert expected in bad_input_line(capsys, argv)


@pytest.fixture
def cpu_data_parallel(monkeypatch):
    """DataParallel on the CPU, which users cannot choose: it calls the module once, so the dp wiring
    (wrap, checkpoint, --show-scatter) is tested without GPUs."""
    monkeypatch.setattr(cifar, "DATA_PARALLEL_DEVICES", ("cuda", "cpu"))


def test_compile_with_data_parallel_is_one_line(capsys, cpu_data_parallel):
    assert "--compile does not work with --parallel dp" in bad_input_line(capsys, ["--parallel", "dp", "--compile"])


@pytest.mark.parametrize("parallel", ["none", "ddp"])
def test_too_little_data_for_one_batch_per_process_is_one_line(capsys, tmp_path, parallel):
    # ddp: 12 images make 6 per process, less than the per-process batch of 8; refused before torchrun starts.
    err = bad_input_line(
        capsys, [*TINY, "--fake-train-size", "12", "--parallel", parallel, "--results-dir", str(tmp_path)]
    )
    assert "12 training images give each of" in err and "use a smaller batch or more data" in err
    assert not list(tmp_path.iterdir())


def test_gpu_choice_is_set_before_cuda_starts(capsys, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU message; this machine has a GPU")
    err = bad_input_line(capsys, ["--device", "cuda", "--gpus", "3, 1", "--parallel", "dp"])
    # The error comes from the CUDA query that follows, and names the chosen GPUs.
    assert "no CUDA GPU is visible" in err and "CUDA_VISIBLE_DEVICES='3,1'" in err


def test_bad_argument_from_the_command_line_has_no_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, str(RECIPE), "--parallel", "ddp", "--nproc", "3", "--global-batch", "256"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2
    assert (
        done.stderr
        == "cifar.py: error: --global-batch 256 does not divide over 3 replicas; use a multiple of 3 or --per-device-batch\n"
    )
    assert not list(tmp_path.iterdir()), "a rejected run must write nothing"


def test_defaults_are_e2s():
    args = cifar.parse_args([])
    assert (args.model, args.image_size, args.global_batch, args.epochs) == ("mobilenet_v2", 112, 256, 10)
    assert (args.lr, args.momentum, args.weight_decay, args.effective_lr) == (0.1, 0.9, 5e-4, 0.1)
    assert (args.parallel, args.world_size, args.per_device_batch) == ("none", 1, 256)
    assert (args.amp, args.channels_last, args.pin_memory, args.workers, args.compile) == (
        "none",
        False,
        False,
        0,
        False,
    )


def test_ddp_splits_the_global_batch_and_linear_scaling_follows_it():
    args = cifar.parse_args(["--parallel", "ddp", "--nproc", "4", "--global-batch", "512", "--lr-scaling", "linear"])
    assert (args.world_size, args.per_device_batch, args.process_batch) == (4, 128, 128)
    assert args.effective_lr == pytest.approx(0.2)
    args = cifar.parse_args(["--parallel", "ddp", "--per-device-batch", "32"])
    assert (args.world_size, args.global_batch) == (2, 64)


def test_fast_preset_on_cpu_and_explicit_options_win():
    args = cifar.parse_args(["--preset", "fast"])
    assert (args.amp, args.channels_last, args.pin_memory, args.workers, args.compile) == (
        "bf16",
        True,
        False,
        2,
        False,
    )
    args = cifar.parse_args(["--preset", "fast", "--amp", "none", "--no-channels-last", "--workers", "0"])
    assert (args.amp, args.channels_last, args.workers) == ("none", False, 0)


def test_warmup_then_cosine_per_epoch():
    args = cifar.parse_args(["--epochs", "4", "--warmup-epochs", "1"])
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=args.effective_lr)
    scheduler = cifar.build_scheduler(optimizer, args)
    rates = []
    for _ in range(args.epochs):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    # Warm-up epoch at half the rate, then cosine over the 3 remaining epochs: 1, 0.75, 0.25.
    assert rates == pytest.approx(
        [0.05, 0.1, 0.1 * (1 + math.cos(math.pi / 3)) / 2, 0.1 * (1 + math.cos(2 * math.pi / 3)) / 2]
    )


# --------------------------------------------------------------------------- data


def test_fake_data_is_deterministic_and_uint8():
    first = cifar.fake_images(12, seed=3, sample_seed=4)
    second = cifar.fake_images(12, seed=3, sample_seed=4)
    assert first[0].dtype == torch.uint8 and first[0].shape == (12, 3, 32, 32)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert not torch.equal(first[0], cifar.fake_images(12, seed=3, sample_seed=5)[0])


def test_real_format_is_read_through_torchvision(tmp_path):
    write_cifar10(tmp_path, train_per_batch=4, test_size=6, seed=7)
    images, labels = cifar.cifar_split(tmp_path, train=True, download=False, data_check="exists")
    expected_images, expected_labels = cifar.fake_images(20, seed=7, sample_seed=8)
    # Batches are concatenated in order and the R, G, B planes come back as channels.
    assert torch.equal(images, expected_images) and torch.equal(labels, expected_labels)
    test_images, test_labels = cifar.cifar_split(tmp_path, train=False, download=False, data_check="exists")
    assert test_images.shape == (6, 3, 32, 32) and len(test_labels) == 6


def test_md5_check_rejects_files_that_are_not_the_official_ones(tmp_path, capsys):
    write_cifar10(tmp_path, train_per_batch=2, test_size=2)
    err = bad_input_line(capsys, ["--data-dir", str(tmp_path), "--no-download", "--results-dir", str(tmp_path / "r")])
    assert "fails torchvision's md5 check" in err and "downloading is off (--no-download)" in err


def test_missing_real_data_without_download_is_one_line(tmp_path, capsys):
    err = bad_input_line(
        capsys, ["--data-dir", str(tmp_path / "none"), "--no-download", "--results-dir", str(tmp_path / "r")]
    )
    assert "CIFAR-10 is not under" in err and "--dataset fake" in err
    assert not (tmp_path / "r").exists()


def test_test_images_are_resized_like_training_images():
    images, labels = cifar.fake_images(4, seed=0, sample_seed=1)
    prepared, _ = cifar.prepare_batch(images, labels, torch.device("cpu"), 112, channels_last=False)
    assert prepared.shape == (4, 3, 112, 112) and prepared.dtype == torch.float32
    args = cifar.parse_args([*TINY, "--image-size", "48"])
    replicas = cifar.local_replicas(args)
    run = harness.Run(args, replicas, recipe=cifar.RECIPE, prog=cifar.PROG, resume_keys=())
    trainer = cifar.Trainer(args, replicas, cifar.data_loaders(args, replicas), run)
    with scatter.replica_calls(trainer.net) as calls:
        trainer.evaluate()
    assert {given for _, given, _ in calls} == {"[16, 3, 48, 48]", "[5, 3, 48, 48]"}


# --------------------------------------------------------------------------- training


def test_real_format_run_writes_e2_results(tmp_path, capsys):
    write_cifar10(tmp_path / "data", train_per_batch=8, test_size=10)
    run_recipe(
        [
            *TINY,
            "--dataset",
            "real",
            "--data-check",
            "exists",
            "--no-download",
            "--data-dir",
            str(tmp_path / "data"),
            "--results-dir",
            str(tmp_path / "r"),
            "--epochs",
            "2",
            "--max-steps",
            "3",
            "--show-scatter",
        ]
    )
    assert capsys.readouterr().out.splitlines()[0] == (
        "scatter (none, cpu): input [16, 3, 32, 32] -> output [16, 10]; one device, nothing to scatter or gather"
    )
    (results,) = results_of(tmp_path / "r")
    assert results["recipe"] == "cifar" and results["run_name"] == "mobilenet_v2-b16-cpu"
    assert results["configuration"] == {
        "device": "cpu",
        "cores": None,
        "strategy": None,
        "parallel": "none",
        "world_size": 1,
        "model": "mobilenet_v2",
        "global_batch": 16,
        "per_device_batch": 16,
        "image_size": 32,
        "dataset": "real",
        "nodes": 1,
        "processes_per_node": 1,
        "backend": None,
    }
    # 40 training images in batches of 16 (the short last batch dropped): 2 steps per epoch, stopped after 3.
    timing, metrics = results["timing"], results["metrics"]
    assert timing["train_epoch_s"]["n"] == timing["test_epoch_s"]["n"] == timing["epoch_s"]["n"] == 2
    assert timing["iter_s"]["n"] == 3
    assert metrics["steps"] == 3 and metrics["images_per_s"] > 0
    # 10 test images: a global accuracy is a multiple of 1/10.
    assert metrics["test_accuracy"] * 10 == pytest.approx(round(metrics["test_accuracy"] * 10))
    assert results["settings"]["lr_scaling"] == "none" and results["settings"]["warmup_epochs"] == 0


def test_data_parallel_on_cpu_trains_and_shows_the_scatter(tmp_path, capsys, cpu_data_parallel):
    run_recipe(
        [
            *TINY,
            "--parallel",
            "dp",
            "--show-scatter",
            "--results-dir",
            str(tmp_path),
            "--epochs",
            "1",
            "--max-steps",
            "2",
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == [
        "scatter (dp, 1 replica(s)): batch [16, 3, 32, 32]",
        "  replica 0 on cpu: input [16, 3, 32, 32] -> output [16, 10]",
        "  gathered on cpu: output [16, 10]",
        "  (cpu: DataParallel has no GPUs and runs the module once; over 2 GPUs the scatter would give inputs "
        "[8, 3, 32, 32], [8, 3, 32, 32] and gather output [16, 10])",
    ]
    (results,) = results_of(tmp_path)
    assert results["run_name"] == "mobilenet_v2-b16-cpu-x1-dp"
    assert results["configuration"]["parallel"] == "dp" and results["configuration"]["world_size"] == 1
    # The checkpoint holds the bare model's weights, whatever wrapper trained it.
    state = torch.load(tmp_path / "checkpoints" / "cifar-mobilenet_v2-b16-cpu-x1-dp.pt", weights_only=True)
    assert not any(key.startswith(("module.", "model.")) for key in state["model"])


def test_scatter_would_split_an_uneven_batch_like_torch_chunk(tmp_path, capsys, cpu_data_parallel):
    run_recipe(
        [
            *TINY,
            "--parallel",
            "dp",
            "--nproc",
            "3",
            "--show-scatter",
            "--results-dir",
            str(tmp_path),
            "--epochs",
            "1",
            "--max-steps",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert "over 3 GPUs the scatter would give inputs [6, 3, 32, 32], [6, 3, 32, 32], [4, 3, 32, 32]" in out


def test_fast_preset_trains_on_cpu(tmp_path):
    run_recipe(
        [
            *TINY,
            "--preset",
            "fast",
            "--workers",
            "1",
            "--results-dir",
            str(tmp_path),
            "--epochs",
            "1",
            "--max-steps",
            "1",
        ]
    )
    (results,) = results_of(tmp_path)
    settings = results["settings"]
    assert (settings["amp"], settings["channels_last"], settings["workers"]) == ("bf16", True, 1)
    assert math.isfinite(results["metrics"]["final_loss"])


def test_resume_continues_exactly_where_the_run_stopped(tmp_path, capsys):
    common_args = [*TINY, "--epochs", "2", "--run-name", "resume"]
    run_recipe([*common_args, "--results-dir", str(tmp_path / "straight")])
    interrupted = tmp_path / "interrupted"
    run_recipe([*common_args, "--results-dir", str(interrupted), "--max-steps", "2"])  # stops after epoch 1 of 2
    run_recipe([*common_args, "--results-dir", str(interrupted), "--resume"])
    (straight,) = results_of(tmp_path / "straight")
    by_name = {results["run_name"]: results for results in results_of(interrupted)}
    first, resumed = by_name["resume"], by_name["resume-2"]  # the interrupted run's results are kept
    assert first["metrics"]["epochs_completed"] == 1
    assert resumed["settings"]["resumed_from_epoch"] == 1
    for key in ("epoch_loss", "epoch_test_accuracy", "epoch_lr", "steps"):
        assert resumed["metrics"][key] == straight["metrics"][key], key
    assert resumed["timing"]["epoch_s"]["n"] == 2


def test_resume_with_other_settings_or_a_corrupt_checkpoint_is_one_line(tmp_path, capsys):
    args = [*TINY, "--epochs", "2", "--run-name", "r", "--results-dir", str(tmp_path), "--max-steps", "1"]
    run_recipe([*args, "--resume"])  # nothing to resume yet: a fresh start, said once
    assert capsys.readouterr().err.count("cifar.py: no checkpoint at ") == 1
    err = bad_input_line(capsys, [*args[:-2], "--resume", "--model", "resnet50"])
    assert "cannot resume from" in err and "model: 'mobilenet_v2' in the checkpoint, 'resnet50' now" in err
    # ddp: refused before torchrun starts (a launched run would fail in each process).
    err = bad_input_line(capsys, [*args[:-2], "--resume", "--parallel", "ddp", "--global-batch", "16"])
    assert "cannot resume from" in err and "parallel: 'none' in the checkpoint, 'ddp' now" in err
    (tmp_path / "checkpoints" / "cifar-r.pt").write_bytes(b"not a checkpoint")
    err = bad_input_line(capsys, [*args[:-2], "--resume"])
    assert "is corrupt or unreadable" in err


# --------------------------------------------------------------------------- several hosts


import ddp  # noqa: E402 - a recipe module, on sys.path like cifar
from results_contract import assert_valid_results  # noqa: E402 - beside the tests that use it


@pytest.fixture
def no_host_environment(monkeypatch):
    for name in (
        "NNODES",
        "NODE_RANK",
        "RDZV_ENDPOINT",
        "RDZV_ID",
        "LOCAL_RANK",
        "TORCHELASTIC_RUN_ID",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
    ):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_one_host_relaunches_standalone(no_host_environment):
    args = cifar.parse_args(["--parallel", "ddp", "--nproc", "3", "--global-batch", "48"])
    assert (args.nnodes, args.world_size, args.rdzv_id) == (1, 3, "envkit")
    command = ddp.torchrun_command(args, "cifar.py", ["--parallel", "ddp"])
    assert command[1:] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--local-addr",
        "127.0.0.1",
        "--nproc-per-node",
        "3",
        "--",
        "cifar.py",
        "--parallel",
        "ddp",
    ]


def test_a_cpu_relaunch_gives_torchrun_the_thread_budget(no_host_environment):
    """torchrun gives each process OMP_NUM_THREADS=1 where it is unset: on a CPU the relaunch sets the run's
    budget first (the CPUs, or the OMP_NUM_THREADS given), which its processes then share (issue 42 goal 3)."""
    no_host_environment.setattr(harness.devices.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    no_host_environment.delenv("OMP_NUM_THREADS", raising=False)
    assert ddp.torchrun_env("cpu")["OMP_NUM_THREADS"] == "3"
    no_host_environment.setenv("OMP_NUM_THREADS", "8")
    assert ddp.torchrun_env("cpu")["OMP_NUM_THREADS"] == "8"
    no_host_environment.delenv("OMP_NUM_THREADS")
    assert "OMP_NUM_THREADS" not in ddp.torchrun_env("cuda")  # a GPU's processes keep torchrun's one thread


def test_several_hosts_relaunch_with_a_c10d_rendezvous(no_host_environment):
    no_host_environment.setenv("NNODES", "2")
    no_host_environment.setenv("RDZV_ENDPOINT", "node1:29400")
    args = cifar.parse_args(["--parallel", "ddp", "--nproc", "2", "--global-batch", "64"])
    assert (args.nnodes, args.world_size, args.per_device_batch, args.node_rank) == (2, 4, 16, None)
    assert ddp.torchrun_command(args, "cifar.py", [])[3:-2] == [
        "--nnodes",
        "2",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "node1:29400",
        "--rdzv-id",
        "envkit",
    ]
    args = cifar.parse_args(
        [
            "--parallel",
            "ddp",
            "--nproc",
            "1",
            "--nnodes",
            "3",
            "--node-rank",
            "2",
            "--rdzv-id",
            "job7",
            "--global-batch",
            "6",
        ]
    )
    assert args.world_size == 3
    assert ddp.torchrun_command(args, "cifar.py", [])[3:-2] == [
        "--nnodes",
        "3",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "node1:29400",
        "--rdzv-id",
        "job7",
        "--node-rank",
        "2",
    ]


@pytest.mark.parametrize(
    ("endpoint", "loopback"),
    [("127.0.0.1:29400", True), ("localhost:29400", True), ("[::1]:29400", True), ("127.0.0.2", True),
     ("node1:29400", False), ("10.0.0.1:29400", False), ("[fe80::1]:29400", False)],
)  # fmt: skip
def test_hosts_meeting_on_loopback_give_each_node_the_loopback_address(no_host_environment, endpoint, loopback):
    """Several "hosts" on one machine (the rendezvous on loopback) must not need the machine's own name to resolve:
    a fresh machine without a 127.0.1.1 line hung in torchrun's rendezvous."""
    args = cifar.parse_args(["--parallel", "ddp", "--nproc", "1", "--nnodes", "2", "--rdzv-endpoint", endpoint])
    command = ddp.torchrun_command(args, "cifar.py", [])
    assert (command[-4:-2] == ["--local-addr", "127.0.0.1"]) is loopback
    assert command.count("--local-addr") == int(loopback)


def test_inside_torchrun_its_settings_count(no_host_environment):
    for name, value in {"LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "RANK": "3"}.items():
        no_host_environment.setenv(name, value)
    args = cifar.parse_args(["--parallel", "ddp", "--global-batch", "64"])  # no --nnodes, no endpoint: a bare torchrun
    assert (args.world_size, args.nnodes, args.per_device_batch) == (4, 2, 16)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--nnodes", "2", "--rdzv-endpoint", "h:1"], "--nnodes 2 needs --parallel ddp"),
        (["--parallel", "ddp", "--nnodes", "2"], "--nnodes 2 needs --rdzv-endpoint host:port (or RDZV_ENDPOINT)"),
        (["--nnodes", "0"], "argument --nnodes: expected a positive integer, got '0'"),
        (["--parallel", "ddp", "--node-rank", "-1"], "argument --node-rank: expected an integer >= 0"),
    ],
)
def test_bad_host_settings_are_one_line(capsys, no_host_environment, argv, expected):
    assert expected in bad_input_line(capsys, argv)


def test_bad_nnodes_from_the_environment_is_one_line(capsys, no_host_environment):
    no_host_environment.setenv("NNODES", "two")
    assert "argument --nnodes: expected a positive integer, got 'two'" in bad_input_line(capsys, [])


def _unreachable_rendezvous(tmp_path: Path, endpoint: str, *launch: str) -> subprocess.CompletedProcess:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("NNODES", "RDZV_ENDPOINT", "LOCAL_RANK", "TORCHELASTIC_RUN_ID")
    }
    return subprocess.run(
        [
            *launch,
            sys.executable,
            str(RECIPE),
            *TINY,
            "--parallel",
            "ddp",
            "--nproc",
            "1",
            "--nnodes",
            "2",
            "--rdzv-endpoint",
            endpoint,
            "--rdzv-timeout",
            "2",
            "--results-dir",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )


def test_a_rendezvous_nobody_answers_is_one_line_after_its_timeout(tmp_path):
    """Another host's endpoint where nothing listens (here a port bound by a socket that never listens): torchrun
    retried for minutes and ended in a RendezvousConnectionError traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{taken.getsockname()[1]}"
        done = _unreachable_rendezvous(tmp_path, endpoint)
    assert done.returncode == 2
    assert done.stderr == (
        f"cifar.py: error: cannot reach the rendezvous at {endpoint}: Connection refused after 2 s "
        f"(--rdzv-timeout); check that the first host runs the same command, that 127.0.0.1 is its address "
        f"as seen from here, and that port {endpoint.split(':')[1]} is open between the hosts\n"
    )
    assert not (tmp_path / "r").exists()


def test_a_rendezvous_with_the_network_down_is_one_line_at_once(tmp_path):
    """The issue's case: loopback down (an empty network namespace), the endpoint this host's own."""
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("'unshare -n' cannot make an empty network namespace here (needs root or user namespaces)")
    done = _unreachable_rendezvous(tmp_path, "127.0.0.1:29400", "unshare", "-n")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert done.stderr.startswith(
        "cifar.py: error: cannot reach the rendezvous at 127.0.0.1:29400: Network is unreachable; check"
    )


def test_nccl_is_told_its_gpu_and_gloo_is_unchanged():
    assert ddp.process_group_arguments(torch.device("cuda", 3)) == {
        "backend": "nccl",
        "device_id": torch.device("cuda", 3),
    }
    assert ddp.process_group_arguments(torch.device("cpu")) == {"backend": "gloo"}

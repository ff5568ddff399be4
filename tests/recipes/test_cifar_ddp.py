"""recipes/cifar.py --parallel ddp: two gloo processes on CPU, started through torchrun (slow: ~1-2 min).

Run with ``pytest --slow tests/recipes/test_cifar_ddp.py``. This file is also the
torchrun worker of the one-step gradient test (see ``__main__`` below).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import cifar
import pytest
import torch
import torch.nn.functional as F
from cifar_files import RECIPE, STEPS_PER_EPOCH, TEST_IMAGES, TRAINING, only_results, recipe
from paths import REPO_ROOT, TESTS

pytestmark = pytest.mark.slow


def test_ddp_splits_the_global_batch_and_matches_one_process(tmp_path, data_dir, ddp_one_host):
    ddp, ddp_results = ddp_one_host  # two processes on this host (the session's run, which test_multihost.py shares)
    recipe([*TRAINING, "--data-dir", str(data_dir), "--results-dir", "single"], tmp_path)

    # Each process got half of the global batch of 16, and nothing was gathered.
    scatter = sorted(line for line in ddp.stdout.splitlines() if line.startswith("scatter"))
    assert scatter == [
        f"scatter (ddp rank {rank}/2, cpu): input [8, 3, 64, 64] -> output [8, 10]; "
        "no gather: each process keeps its outputs and DDP all-reduces gradients"
        for rank in (0, 1)
    ]
    distributed, single = only_results(ddp_results), only_results(tmp_path / "single")
    assert distributed["run_name"] == "mobilenet_v2-b16-cpu-x2-ddp"
    configuration = distributed["configuration"]
    assert (configuration["parallel"], configuration["world_size"]) == ("ddp", 2)
    assert (configuration["global_batch"], configuration["per_device_batch"]) == (16, 8)
    # One thread budget for both (issue 32): torchrun alone would give each process one thread, one process all.
    budget = single["threads"]["budget"]
    # Both were given OMP_NUM_THREADS (cifar_files.recipe's), the budget they share; the DDP run's relaunch passed it
    # on to torchrun, whose own default is one thread a process whatever the budget (issue 42 goal 3).
    assert single["threads"] == {
        "budget": budget,
        "budget_from": "OMP_NUM_THREADS",
        "processes": 1,
        "per_process": budget,
    }
    assert budget == 1  # cifar_files.recipe's OMP_NUM_THREADS, not the CPUs (which the recipe took before)
    assert distributed["threads"] == {
        "budget": budget,
        "budget_from": "OMP_NUM_THREADS",
        "processes": 2,
        "per_process": max(1, budget // 2),
    }
    # Only rank 0 writes: one results file, one checkpoint, no temp files.
    assert sorted(p.name for p in ddp_results.rglob("*") if p.is_file()) == [
        "cifar-mobilenet_v2-b16-cpu-x2-ddp.json",
        "cifar-mobilenet_v2-b16-cpu-x2-ddp.pt",
    ]

    ours, theirs = distributed["metrics"], single["metrics"]
    assert ours["steps"] == theirs["steps"] == 6 * STEPS_PER_EPOCH  # same global steps: 16 images each
    for accuracy in ours["epoch_test_accuracy"]:
        assert accuracy * TEST_IMAGES == pytest.approx(round(accuracy * TEST_IMAGES)), (
            "accuracy is not over the whole test set"
        )
    trajectories = f"ddp {ours['epoch_test_accuracy']}, one process {theirs['epoch_test_accuracy']}"
    assert ours["test_accuracy"] == pytest.approx(theirs["test_accuracy"], abs=0.05), trajectories
    assert ours["test_accuracy"] > 0.9, trajectories
    assert ours["epoch_loss"][-1] < ours["epoch_loss"][0]


def test_ddp_resume_continues_from_rank_0s_checkpoint(tmp_path, data_dir):
    common_args = [*TRAINING, "--data-dir", str(data_dir), "--parallel", "ddp", "--epochs", "2", "--run-name", "r"]
    recipe([*common_args, "--max-steps", str(STEPS_PER_EPOCH)], tmp_path)  # stops after epoch 1
    recipe([*common_args, "--resume"], tmp_path)
    resumed = json.loads((tmp_path / "results" / "cifar-r-2.json").read_text())
    assert resumed["settings"]["resumed_from_epoch"] == 1
    assert resumed["metrics"]["epochs_completed"] == 2 and resumed["timing"]["epoch_s"]["n"] == 2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_hosts_write_one_results_file(tmp_path, data_dir):
    """Two torchrun "hosts" (local processes meeting at a c10d rendezvous on 127.0.0.1), one process each:
    rank 0 alone writes results and checkpoints, which record 2 nodes x 1 process."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("NNODES", "NODE_RANK", "RDZV_ENDPOINT", "RDZV_ID", "LOCAL_RANK", "TORCHELASTIC_RUN_ID")
    }
    env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    argv = [
        *TRAINING,
        "--epochs",
        "1",  # rank 0 writes its record and its checkpoint after every epoch: one shows who writes
        "--data-dir",
        str(data_dir),
        "--parallel",
        "ddp",
        "--nproc",
        "1",
        "--nnodes",
        "2",
        "--rdzv-endpoint",
        f"127.0.0.1:{free_port()}",
        "--results-dir",
        "results",
    ]
    hosts = []
    for host in ("host-a", "host-b"):
        (tmp_path / host).mkdir()
        hosts.append(
            subprocess.Popen(
                [sys.executable, str(RECIPE), *argv],
                cwd=tmp_path / host,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for process in hosts:
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-3000:]
    (path,) = tmp_path.rglob("cifar-*.json")
    assert [p.name for p in tmp_path.rglob("*.pt")] == ["cifar-mobilenet_v2-b16-cpu-x2-ddp.pt"]
    assert (
        path.parent.parent == next(p.parent for p in tmp_path.rglob("*.pt")).parent.parent
    )  # the same host wrote both
    configuration = json.loads(path.read_text())["configuration"]
    assert (configuration["nodes"], configuration["processes_per_node"], configuration["world_size"]) == (2, 1, 2)
    assert (configuration["global_batch"], configuration["per_device_batch"]) == (16, 8)


def test_one_ddp_step_equals_one_full_batch_step(tmp_path):
    """With BatchNorm on running statistics and no dropout (eval mode), two processes
    stepping on half a batch each must end where one process stepping on the whole batch does."""
    # the worker runs this file as a script: pytest's pythonpath setting is not there, so it goes in the environment
    found = os.pathsep.join(str(folder) for folder in (TESTS, REPO_ROOT / "recipes"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CIFAR_DDP_STEP_OUT": str(tmp_path / "ddp.pt"), "PYTHONPATH": found}
    loopback = "--local-addr=127.0.0.1"  # a host whose own name does not resolve waits out the rendezvous otherwise
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", loopback, "--nproc_per_node=2", __file__]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    single = one_step(cifar.Replicas(device=torch.device("cpu"), parallel="none"))
    distributed = torch.load(tmp_path / "ddp.pt", weights_only=True)
    for name, value in single.items():
        torch.testing.assert_close(distributed[name], value, rtol=1e-5, atol=1e-6, msg=name)


def one_step(replicas: cifar.Replicas) -> dict:
    """One SGD step of the recipe's wrapped model on this process's share of a fixed batch of 16."""
    images, labels = cifar.fake_images(16, seed=0, sample_seed=1)
    torch.manual_seed(0)
    net = cifar.build_model("mobilenet_v2")
    model = replicas.wrap(net)
    model.eval()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    share = slice(replicas.rank, None, replicas.world_size)
    images, labels = cifar.prepare_batch(images[share], labels[share], replicas.device, 32, channels_last=False)
    F.cross_entropy(model(images), labels).backward()
    optimizer.step()
    return net.state_dict()


if __name__ == "__main__":
    # The torchrun worker of test_one_ddp_step_equals_one_full_batch_step.
    import torch.distributed as dist

    dist.init_process_group("gloo")
    state = one_step(
        cifar.Replicas(
            device=torch.device("cpu"), parallel="ddp", rank=dist.get_rank(), world_size=dist.get_world_size()
        )
    )
    if dist.get_rank() == 0:
        torch.save(state, os.environ["CIFAR_DDP_STEP_OUT"])
    dist.barrier()  # as the recipe does: nobody closes the group while rank 0 still works
    dist.destroy_process_group()

"""recipes/cifar.py DDP over gloo across two hosts (network namespaces on this machine), issue 15 §2 (the real ones are slow: ~1.5 min).

One ``torchrun --nnodes 2 --nproc-per-node 1`` per host, rendezvous on node1, must
train as two processes on one host do: one results file, written by rank 0 on
node1, with the same accuracy within test_cifar_ddp.py's tolerance.
Run with ``pytest --slow tests/integration/test_multihost.py`` as root.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cifar_files import RECIPE, TEST_IMAGES, TRAINING, only_results
from multihost import HOSTS_SCRIPT, NAMESPACE_TOOLS, require, torchrun_on_hosts


@pytest.mark.slow
def test_namespace_hosts_have_their_own_names_and_reach_each_other(two_hosts):
    seen = subprocess.run(
        two_hosts.command("node2", "sh", "-c", "hostname; getent hosts node1"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert seen.returncode == 0, seen.stderr
    name, node1 = seen.stdout.splitlines()
    assert name == "node2"
    assert node1.split()[1] == "node1"
    # The namespaces are this run's own, and exist only while the fixture holds them.
    namespaces = (two_hosts.state / "namespaces").read_text().split()[1::2]
    assert len(namespaces) == 3 and all(namespace.startswith("envkit-") for namespace in namespaces)
    assert all(Path("/run/netns", namespace).exists() for namespace in namespaces)


@pytest.mark.slow
def test_ddp_across_two_hosts_matches_two_processes_on_one(tmp_path, data_dir, two_hosts, ddp_one_host):
    common_args = [*TRAINING, "--data-dir", str(data_dir), "--parallel", "ddp", "--show-scatter"]
    ranks = torchrun_on_hosts(
        two_hosts, RECIPE, [*common_args, "--results-dir", str(tmp_path / "two-hosts")], cwd=tmp_path
    )
    for node, done in zip(two_hosts.nodes, ranks):
        assert done.returncode == 0, f"{node}: {done.stderr[-3000:]}"
    _, one_host_results = ddp_one_host  # the same arguments with --nproc 2 on this host (cifar_files.py)

    # Each host ran one rank, with half of the global batch.
    assert [
        done.stdout.count(f"scatter (ddp rank {rank}/2, cpu): input [8, 3, 64, 64]") for rank, done in enumerate(ranks)
    ] == [1, 1]
    # Rank 0 alone wrote, on node1: one results file, one checkpoint.
    assert sorted(p.name for p in (tmp_path / "two-hosts").rglob("*") if p.is_file()) == [
        "cifar-mobilenet_v2-b16-cpu-x2-ddp.json",
        "cifar-mobilenet_v2-b16-cpu-x2-ddp.pt",
    ]
    across, one_host = only_results(tmp_path / "two-hosts"), only_results(one_host_results)
    # The recipe alone records torch's facts; the host is the run wrapper's, which a launch engine starts around
    # torchrun on each node (tests/integration/test_slurm.py runs that).
    assert across["environment"].get("host") is None
    configuration = across["configuration"]
    assert (configuration["world_size"], configuration["per_device_batch"]) == (2, 8)
    # Two hosts of one process each; the single-host run is one host of two.
    assert (configuration["nodes"], configuration["processes_per_node"]) == (2, 1)
    assert (one_host["configuration"]["nodes"], one_host["configuration"]["processes_per_node"]) == (1, 2)
    ours, theirs = across["metrics"], one_host["metrics"]
    assert ours["steps"] == theirs["steps"]
    for accuracy in ours["epoch_test_accuracy"]:
        assert accuracy * TEST_IMAGES == pytest.approx(round(accuracy * TEST_IMAGES)), (
            "accuracy is not over the whole test set"
        )
    trajectories = f"two hosts {ours['epoch_test_accuracy']}, one host {theirs['epoch_test_accuracy']}"
    assert ours["test_accuracy"] == pytest.approx(theirs["test_accuracy"], abs=0.05), trajectories
    assert ours["test_accuracy"] > 0.9, trajectories


def test_a_missing_tool_fails_when_slurm_is_required(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("ENVKIT_REQUIRE_SLURM", "1")
    with pytest.raises(pytest.fail.Exception, match="ENVKIT_REQUIRE_SLURM=1 but ip, nsenter, unshare not on PATH"):
        require(NAMESPACE_TOOLS)
    monkeypatch.setenv("ENVKIT_REQUIRE_SLURM", "0")
    with pytest.raises(pytest.skip.Exception, match="ip, nsenter, unshare not on PATH"):
        require(NAMESPACE_TOOLS)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["up", "{state}", "0"], "NODES must be a whole number from 1 to 200, not '0'"),
        (["up", "{state}", "2; touch /tmp/x"], "NODES must be a whole number from 1 to 200, not '2; touch /tmp/x'"),
        (["exec", "{state}", "node1", "true"], "holds no hosts (no namespaces); run"),
        (["sideways", "{state}"], "usage: "),
    ],
)
def test_netns_hosts_bad_input_is_one_line_and_exit_2(tmp_path, argv, message):
    state = tmp_path / "state"
    done = subprocess.run(
        ["bash", str(HOSTS_SCRIPT), *(arg.format(state=state) for arg in argv)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert len(done.stderr.splitlines()) == 1 and message in done.stderr, done.stderr
    assert not (state / "namespaces").exists()

"""The hosts engine: the run.sh command each host runs; envkit starts nothing."""

from __future__ import annotations

import pytest
from launch_jobs import run


def test_hosts_prints_the_commands_and_starts_nothing(capsys, project, fake_path):
    code, out, _ = run(
        capsys, "launch", "cpu-ddp-cifar", "--on", "hosts", "--nodes", "2", "--hosts", "a,b", "--nproc-per-node", "2"
    )
    assert code == 0 and out.count("NNODES=2 RDZV_ENDPOINT=a:29500") == 2 and "--nproc 2" in out
    assert sorted(p.name for p in project.iterdir()) == ["envkit.yaml"]


@pytest.mark.parametrize("nodes", [(), ("--nodes", "1"), ("--nodes", "3")])
def test_hosts_and_nodes_that_disagree_are_one_line(capsys, project, fake_path, nodes):
    # Two hosts with one node each would be two single-node jobs sharing a rendezvous, not one job of two nodes.
    code, out, err = run(capsys, "launch", "cpu-ddp-cifar", "--on", "hosts", *nodes, "--hosts", "a,b", "--dry-run")
    assert code == 2 and out == ""
    assert err.splitlines()[-1].startswith("envkit: error: --on hosts with --nodes ")
    assert "got 2: give as many --nodes as --hosts" in err and "Traceback" not in err

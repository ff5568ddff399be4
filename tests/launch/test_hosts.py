"""The hosts engine: the run.sh command each host runs; envkit starts nothing."""

from __future__ import annotations

from launch_jobs import run


def test_hosts_prints_the_commands_and_starts_nothing(capsys, project, fake_path):
    code, out, _ = run(
        capsys, "launch", "cpu-ddp-cifar", "--on", "hosts", "--nodes", "2", "--hosts", "a,b", "--nproc-per-node", "2"
    )
    assert code == 0 and out.count("NNODES=2 RDZV_ENDPOINT=a:29500") == 2 and "--nproc 2" in out
    assert sorted(p.name for p in project.iterdir()) == ["envkit.yaml"]

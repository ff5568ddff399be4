"""The conditions of a run's measurement (issue 40 §5): the CPUs a container's CPU quota allows, read from its cgroup
(provenance_facts.cpu_quota), as the run wrapper records them beside the CPUs its affinity gives it."""

from __future__ import annotations

from pathlib import Path

import pytest

from envkit.support import provenance_facts


def cgroup(tmp_path: Path, line: str, files: dict[str, str]) -> tuple[Path, Path]:
    """A /proc/self/cgroup holding ``line`` and a /sys/fs/cgroup holding ``files`` (path: text)."""
    (tmp_path / "proc").write_text(line + "\n")
    for name, text in files.items():
        (tmp_path / "sys" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "sys" / name).write_text(text)
    return tmp_path / "proc", tmp_path / "sys"


@pytest.mark.parametrize(
    ("line", "files", "quota"),
    [
        # docker run --cpus 1.5 (cgroup v2, a namespace of its own: its cgroup is the root)
        ("0::/", {"cpu.max": "150000 100000\n"}, 1.5),
        # a systemd slice's limit holds for the scope under it: the smallest of the path's
        ("0::/user.slice/run.scope",
         {"user.slice/cpu.max": "200000 100000\n", "user.slice/run.scope/cpu.max": "max 100000\n"}, 2.0),
        ("0::/", {"cpu.max": "max 100000\n"}, None),  # no quota
        # cgroup v1: the CFS quota over its period; -1 is none
        ("4:cpu,cpuacct:/docker/abc",
         {"cpu/docker/abc/cpu.cfs_quota_us": "50000\n", "cpu/docker/abc/cpu.cfs_period_us": "100000\n"}, 0.5),
        ("4:cpu,cpuacct:/", {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ("0::/gone", {}, None),  # nothing readable: not known, never an error
        ("garbage", {}, None),
    ],
)  # fmt: skip
def test_a_containers_cpu_quota_is_read_from_its_cgroup(tmp_path, line, files, quota):
    assert provenance_facts.cpu_quota(*cgroup(tmp_path, line, files)) == quota


def test_the_usable_cpus_are_the_affinitys_under_the_quota_and_the_share_is_of_them(monkeypatch):
    monkeypatch.setattr(provenance_facts.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(provenance_facts, "cpu_quota", lambda: 2.0)
    reports = [{"torch_threads": 2}, {"torch_threads": 2}, {"prefix": "/venv"}]
    assert provenance_facts.conditions({"OMP_NUM_THREADS": "2"}, reports, wall=10.0, cpu_time=5.0) == {
        "thread_variables": {
            "OMP_NUM_THREADS": "2",
            "MKL_NUM_THREADS": None,
            "OPENBLAS_NUM_THREADS": None,
            "NUMEXPR_NUM_THREADS": None,
        },
        "torch_threads": [2],
        "cpus": 4,
        "cpu_quota": 2.0,
        "usable_cpus": 2.0,
        "cpu_share": 0.25,  # 5 CPU seconds of 2 CPUs x 10 s
    }

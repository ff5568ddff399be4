"""Fixtures for the integration tests: two namespace hosts, and a Slurm cluster on them (tests/multihost.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from multihost import Hosts, SlurmCluster, namespace_hosts, slurm_cluster


@pytest.fixture
def two_hosts(tmp_path) -> Iterator[Hosts]:
    with namespace_hosts(tmp_path / "hosts") as hosts:
        yield hosts


@pytest.fixture
def two_node_slurm(tmp_path) -> Iterator[SlurmCluster]:
    with slurm_cluster(tmp_path / "cluster") as cluster:
        yield cluster

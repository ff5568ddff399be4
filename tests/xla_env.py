"""Finding the torch_xla interpreter the XLA tests run the recipes with.

The XLA environment (``.venv-xla``, from requirements/xla.lock) is separate from
the dev environment: torch_xla 2.9.0 needs exactly torch 2.9.0. Tests run it as
a subprocess. Missing -> the test skips, unless ENVKIT_REQUIRE_XLA=1 (CI), where
it fails, so CI cannot pass without running them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest
from paths import REPO_ROOT

DEFAULT_XLA_PYTHON = REPO_ROOT / ".venv-xla" / "bin" / "python"


def xla_python() -> str:
    """Path of a Python that imports torch_xla (ENVKIT_XLA_PYTHON, else .venv-xla), or skip/fail."""
    python = Path(os.environ.get("ENVKIT_XLA_PYTHON") or DEFAULT_XLA_PYTHON)
    problem = None
    if not python.exists():
        problem = f"no XLA interpreter at {python} (create it with 'make xla-env' or set ENVKIT_XLA_PYTHON)"
    else:
        check = subprocess.run(
            [str(python), "-c", "import torch_xla"],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PJRT_DEVICE": "CPU"},
        )
        if check.returncode != 0:
            last = (check.stderr.strip().splitlines() or ["?"])[-1]
            problem = f"{python} cannot import torch_xla ({last})"
    if problem is None:
        return str(python)
    environment_missing(problem, "ENVKIT_REQUIRE_XLA")


def environment_missing(problem: str, required_by: str) -> NoReturn:
    """Skip the test for ``problem``, or fail it where the variable ``required_by`` is set (CI)."""
    if os.environ.get(required_by, "") not in ("", "0"):
        pytest.fail(f"{required_by}=1 but {problem}")
    pytest.skip(problem)


NO_TPU_LINE = (
    "mnist.py: error: --device tpu: TorchTPU found no TPU on this host (torch_tpu 0.2.0 has no CPU mode); "
    "run on a TPU VM, or use --device cpu\n"
)

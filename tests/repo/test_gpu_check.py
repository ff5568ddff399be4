"""benchmarks/gpu_check.sh, the GPU check the project owns (issue 32's tests): it lints, refuses a GPU-less host in
one line before it writes anything, and (slow) its CPU dry run takes the same commands end to end on this host."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from linters import linter
from paths import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu_check.sh"
BIN = Path(sys.executable).parent


def gpu_check(tmp_path: Path, timeout: int = 900, **env: str) -> subprocess.CompletedProcess:
    environment = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        "PYTHON": sys.executable,
        "ENVKIT": str(BIN / "envkit"),
        "GPU_CHECK_WORK": str(tmp_path / "work"),
        **env,
    }
    return subprocess.run(
        ["bash", str(SCRIPT)], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=timeout
    )


def test_it_is_valid_bash_that_shellcheck_passes():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    done = subprocess.run([linter("shellcheck"), str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_docs_say_how_to_run_it():
    text = (REPO_ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert "benchmarks/gpu_check.sh" in text and "GPU_CHECK_DRY_RUN=1" in text


def test_bad_settings_are_one_line_before_anything_runs(tmp_path):
    done = gpu_check(tmp_path, GPU_CHECK_CIFAR_EPOCHS="many")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "gpu_check: error: GPU_CHECK_CIFAR_EPOCHS must be a positive integer; got 'many'\n"


def test_an_earlier_checks_records_are_refused_not_pooled(tmp_path):
    (tmp_path / "work" / "results").mkdir(parents=True)
    (tmp_path / "work" / "results" / "train-1.json").write_text("{}")
    done = gpu_check(tmp_path, GPU_CHECK_DRY_RUN="1")
    assert (done.returncode, done.stderr.count("\n")) == (2, 1) and "an earlier check's records" in done.stderr


def test_a_host_without_a_gpu_is_refused_in_one_line_and_nothing_is_written(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU: the check runs here")
    done = gpu_check(tmp_path)
    assert (done.returncode, done.stdout, done.stderr.count("\n")) == (2, "", 1), done.stderr
    assert done.stderr.startswith("gpu_check: error: no CUDA GPU here") and "GPU_CHECK_DRY_RUN=1" in done.stderr
    assert not (tmp_path / "work").exists()


@pytest.mark.slow
def test_its_dry_run_takes_the_same_commands_end_to_end_on_the_cpu(tmp_path):
    done = gpu_check(tmp_path, GPU_CHECK_DRY_RUN="1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    # the example's record: the device the program initialised beside the target's label, and its printed metrics
    assert '"accelerator": "cpu"' in out and '"label": "cuda"' in out and '"accuracy": 0.' in out
    assert "gpu_check: cpu-mnist: " in out and "gpu_check: cpu-single-cifar: " in out
    assert "## experiment train" in out and "published" in out
    records = sorted(path.name for path in (tmp_path / "work" / "results").glob("*.json"))
    assert len(records) == 3 and [name.split("-")[0] for name in records] == ["cifar", "mnist", "train"], records

"""A GPU or TPU experiment run on this host's interpreter without its device is refused before it starts, unless
--allow-cpu asks for a CPU stand-in (issue 32 §3)."""

from __future__ import annotations

import pytest

from envkit.errors import EnvkitError
from envkit.host.accelerator import require_accelerator


@pytest.fixture
def no_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    monkeypatch.delenv("PJRT_DEVICE", raising=False)


def test_a_gpu_experiment_without_a_gpu_is_one_line_naming_the_flag(no_gpu):
    with pytest.raises(EnvkitError) as refused:
        require_accelerator("gpu-train", "cuda", allow_cpu=False)
    assert str(refused.value).startswith("gpu-train is a cuda experiment and this host cannot give it its device")
    assert "--allow-cpu runs it here on the CPU as a stand-in" in str(refused.value)
    assert refused.value.exit_code == 2
    # it then runs as a CPU stand-in (its processes start as a CPU run's, envkit.runs.torchrun)
    assert require_accelerator("gpu-train", "cuda", allow_cpu=True) is True
    assert require_accelerator("cpu-train", "cpu", allow_cpu=False) is False


def test_a_host_whose_nvidia_smi_lists_a_gpu_runs_it(no_gpu, tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)'\n")
    smi.chmod(0o755)
    assert require_accelerator("gpu-train", "cuda", allow_cpu=False) is False
    assert require_accelerator("gpu-train", "cuda", allow_cpu=True) is False  # no stand-in where the GPU is


def test_a_tpu_experiment_is_refused_unless_xla_is_asked_to_run_on_the_cpu(no_gpu, monkeypatch):
    with pytest.raises(EnvkitError, match="tpu-train is a tpu-vm experiment"):
        require_accelerator("tpu-train", "tpu-vm", allow_cpu=False)
    monkeypatch.setenv("PJRT_DEVICE", "CPU")  # E3 on XLA:CPU, as the Makefile documents it
    require_accelerator("tpu-train", "tpu-vm", allow_cpu=False)

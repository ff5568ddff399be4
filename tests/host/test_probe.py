"""The device probe: real on CPU; the GPU and TPU branches through their failure paths.

No GPU or TPU is here: every test named ``test_faked_*`` patches torch.cuda or installs a stand-in
torch_tpu, so what it checks for real is the probe's own handling (one line, the exit status, the
NCCL step), never a device. The CPU step and torch_xla's step on XLA:CPU run for real.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import probe
import pytest
import torch
from paths import REPO_ROOT
from xla_env import xla_python

from envkit import cli
from envkit.host import doctor

PROBE = REPO_ROOT / "recipes" / "probe.py"


def run_probe(*args: str, python: str = sys.executable, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([python, str(PROBE), *args], capture_output=True, text=True, env=env, timeout=600)


def by_device(record: dict) -> dict:
    return {device["device"]: device for device in record["devices"]}


def test_cpu_trains_for_real_and_absent_devices_say_why():
    done = run_probe("--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    devices = by_device(record)
    assert record["ok"] is True and record["torch"] == torch.__version__
    assert devices["cpu"]["status"] == "ok" and devices["cpu"]["step_s"] > 0
    assert devices["cuda"]["status"] == "absent" and devices["cuda"]["detail"].startswith("no CUDA device (")
    assert devices["tpu"] == {
        "device": "tpu",
        "status": "absent",
        "step_s": None,
        "backend": None,
        "detail": "no TPU backend installed (neither torch_xla nor torch_tpu)",
    }


def test_human_output_is_one_line_per_device():
    done = run_probe("--data-dir", "/x", "--results-dir", "/y")  # what run.sh appends to every recipe
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"probe: torch {torch.__version__}, Python ")
    assert [line.split()[:2] for line in lines[1:]] == [["cpu", "OK"], ["cuda", "--"], ["tpu", "--"]]
    assert lines[1].split()[2:4] == ["step", lines[1].split()[3]] and lines[1].split()[4] == "ms;"


@pytest.fixture
def one_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_faked_no_cuda_device_names_the_build(monkeypatch):
    """torch.version.cuda faked (this torch is a CPU build): the message for either build is real."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    assert probe.probe_cuda() == [
        probe.Result("cuda", "absent", f"no CUDA device (torch {torch.__version__} is a CPU-only build)")
    ]
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    [result] = probe.probe_cuda()
    assert result.detail == f"no CUDA device (torch {torch.__version__} (CUDA 13.0) sees none; CUDA_VISIBLE_DEVICES='')"


def test_faked_gpu_failure_is_one_line_and_fails_the_probe(one_gpu, monkeypatch, capsys):
    """One GPU faked (torch.cuda patched) whose first call fails: the probe's one line and exit 1 are real."""

    def broken(device):
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device\nmore detail")

    monkeypatch.setattr(torch.cuda, "get_device_name", broken)
    monkeypatch.setattr(probe, "has_tpu_hardware", lambda: False)
    assert probe.main([]) == 1
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("cuda:0"))
    assert line.split(None, 2)[1:] == [
        "FAILED",
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    ]


def test_faked_two_gpus_add_an_nccl_all_reduce_whose_failure_is_one_line(monkeypatch):
    """Two GPUs and the NCCL spawn faked: that a second GPU adds the all-reduce step, and its failure line, are real."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(probe, "probe_gpu", lambda index: probe.Result(f"cuda:{index}", "ok", "fake", 0.001))

    def spawn(*args, **kwargs):
        raise RuntimeError("NCCL error: unhandled system error")

    monkeypatch.setattr(probe.mp, "spawn", spawn)
    results = probe.probe_cuda()
    assert [r.device for r in results] == ["cuda:0", "cuda:1", "cuda:0+1 nccl"]
    assert results[-1] == probe.Result("cuda:0+1 nccl", "failed", "RuntimeError: NCCL error: unhandled system error")


@pytest.fixture
def fake_torch_tpu(tmp_path, monkeypatch):
    """An installed distribution named torch_tpu whose import registers no device, as torch_tpu does without a chip."""
    site = tmp_path / "site"
    (site / "torch_tpu").mkdir(parents=True)
    (site / "torch_tpu" / "__init__.py").write_text("")
    info = site / "torch_tpu-0.2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_tpu\nVersion: 0.2.0\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "torch_tpu", raising=False)
    yield tmp_path
    sys.modules.pop("torch_tpu", None)


def fake_pci(tmp_path: Path, vendor: str) -> Path:
    device = tmp_path / "pci" / "0000:00:04.0"
    device.mkdir(parents=True)
    (device / "vendor").write_text(f"{vendor}\n")
    return tmp_path / "pci"


def test_faked_torch_tpu_without_a_tpu_is_absent_with_the_reason(fake_torch_tpu, monkeypatch):
    """A stand-in torch_tpu distribution (the real one is tested in tests/recipes/test_tpu_backend.py's slow tests)."""
    monkeypatch.setattr(probe, "PCI_DEVICES", fake_pci(fake_torch_tpu, "0x8086"))
    assert not probe.has_tpu_hardware()
    assert probe.probe_tpu(probe.has_tpu_hardware()) == [
        probe.Result(
            "tpu",
            "absent",
            "no TPU device (no Google TPU on the PCI bus); torch_tpu 0.2.0 has no CPU mode",
            backend="torch_tpu",
        )
    ]


def test_faked_torch_tpu_that_registers_no_device_on_a_tpu_host_fails_in_one_line(fake_torch_tpu, monkeypatch):
    """A stand-in torch_tpu and a TPU chip faked (has_tpu_hardware patched): the failure line is real."""
    monkeypatch.setattr(probe, "PCI_DEVICES", fake_pci(fake_torch_tpu, "0x1ae0"))
    assert probe.has_tpu_hardware()
    result = probe.probe_torch_tpu(True)
    assert (result.device, result.status, result.backend) == ("tpu", "failed", "torch_tpu")
    # The current accelerator is None on a CPU build of torch, "cuda" on a CUDA build without a GPU.
    assert result.detail.startswith(
        "torch_tpu 0.2.0: RuntimeError: torch_tpu registered no tpu device (current accelerator: "
    )


def test_without_a_tpu_the_probe_keeps_libtpu_off_the_metadata_server(monkeypatch, capsys):
    monkeypatch.delenv("TPU_SKIP_MDS_QUERY", raising=False)
    monkeypatch.setattr(probe, "has_tpu_hardware", lambda: False)
    monkeypatch.setattr(probe, "probe_cpu", lambda: probe.Result("cpu", "ok", "fake", 0.001))
    assert probe.main(["--json"]) == 0
    assert os.environ["TPU_SKIP_MDS_QUERY"] == "1"


@pytest.mark.slow
def test_torch_xla_runs_one_step_on_xla_cpu_and_says_it_is_not_a_tpu():
    done = run_probe("--json", python=xla_python(), env={**os.environ, "PJRT_DEVICE": "CPU"})
    assert done.returncode == 0, done.stderr
    tpu = by_device(json.loads(done.stdout))["tpu"]
    assert (tpu["status"], tpu["backend"]) == ("ok", "torch_xla") and tpu["step_s"] > 0
    assert "on XLA:CPU (PJRT_DEVICE=CPU, not a TPU)" in tpu["detail"]


@pytest.mark.slow
def test_torch_xla_without_a_tpu_or_pjrt_device_is_absent():
    env = {key: value for key, value in os.environ.items() if key != "PJRT_DEVICE"}
    done = run_probe("--json", python=xla_python(), env=env)
    assert done.returncode == 0, done.stderr
    tpu = by_device(json.loads(done.stdout))["tpu"]
    assert tpu["status"] == "absent" and tpu["detail"].startswith(
        "no TPU device (no Google TPU on the PCI bus); torch_xla "
    )


# --------------------------------------------------------------------------- envkit doctor --probe


def test_doctor_probe_runs_the_recipe_here(repo_root, monkeypatch, capfd):
    monkeypatch.chdir(repo_root)
    assert cli.main(["doctor", "--probe", "--json"]) == 0
    record = json.loads(capfd.readouterr().out)
    assert by_device(record)["cpu"]["status"] == "ok"


def test_doctor_probe_image_that_is_not_built_is_one_line(tmp_path, monkeypatch, capsys):
    import docker

    class Images:
        def get(self, reference):
            raise docker.errors.ImageNotFound(reference)

    class Engine:
        images = Images()

    (tmp_path / "envkit.yaml").write_text('targets:\n  cpu: {kind: cpu, torch: "2.9.0"}\n')
    (tmp_path / "recipes").mkdir()
    shutil.copy(PROBE, tmp_path / "recipes")
    monkeypatch.setattr("envkit.support.docker_client.connect_docker", Engine)  # the engine may hold a real envkit-cpu
    monkeypatch.setattr(
        doctor, "inspect_host", lambda: doctor.HostFacts(docker_version="20.10.24", free_disk_gb=50.0, cpu_count=2)
    )
    monkeypatch.setattr(doctor, "connect_docker", Engine)
    assert cli.main(["doctor", "--probe", "--image", "cpu", "--config", str(tmp_path / "envkit.yaml")]) == 2
    out, err = capsys.readouterr()
    assert (
        out == ""
        and err == "envkit: error: no image envkit-cpu:latest in the engine: build it first with 'envkit build cpu'\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["envkit.yaml", "recipes"]


def test_doctor_probe_image_in_a_project_without_the_probe_is_one_line(tmp_path, capsys):
    (tmp_path / "envkit.yaml").write_text('targets:\n  cpu: {kind: cpu, torch: "2.9.0"}\n')
    assert cli.main(["doctor", "--probe", "--image", "cpu", "--config", str(tmp_path / "envkit.yaml")]) == 2
    assert capsys.readouterr() == (
        "",
        f"envkit: error: no {tmp_path}/recipes/probe.py: run the probe from the project directory (beside "
        "recipes/), or pass --config\n",
    )


def test_doctor_image_needs_probe(capsys):
    assert cli.main(["doctor", "--image", "cpu"]) == 2
    assert (
        capsys.readouterr().err
        == "envkit: error: --image applies to --probe only: envkit doctor --probe --image TARGET\n"
    )

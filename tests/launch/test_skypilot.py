"""SkyPilot task YAMLs checked by SkyPilot itself, offline.

SkyPilot is not in envkit's environments (it pulls in cloud SDKs): point
ENVKIT_SKY_PYTHON at an interpreter that has it (`make sky-env` makes
.venv-sky; CI sets it). It runs inside an empty network namespace (`unshare
--net`, root), so it cannot reach any cloud. Without one the test skips, unless
ENVKIT_REQUIRE_SKY=1 (CI), where it fails: the rule of every optional environment.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from launch_jobs import make_job
from xla_env import environment_missing

from envkit.launch import skypilot, yaml_text

CHECK = """
import json, sys
import sky
out = {}
for path in sys.argv[1:]:
    try:
        task = sky.Task.from_yaml(path)
        out[path] = {"num_nodes": task.num_nodes, "resources": sorted(str(r) for r in task.resources), "envs": task.envs}
    except Exception as exc:
        out[path] = {"error": str(exc).splitlines()[0]}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def sky_python():
    python = os.environ.get("ENVKIT_SKY_PYTHON")
    if not python:
        environment_missing(
            "ENVKIT_SKY_PYTHON is not set: no interpreter with SkyPilot to check the task YAML with (make sky-env)",
            "ENVKIT_REQUIRE_SKY",
        )
    probe = subprocess.run(["unshare", "--net", python, "-c", "import sky"], capture_output=True, text=True)
    if probe.returncode != 0:
        # Named on purpose (CI: make sky-env), so a SkyPilot that cannot run is a failure, not a skip.
        pytest.fail(
            f"ENVKIT_SKY_PYTHON={python} cannot run SkyPilot in an empty network namespace: "
            f"{probe.stderr.strip().splitlines()[-1:]}"
        )
    return python


@pytest.mark.slow  # SkyPilot takes about 15 s to import and check three tasks
def test_sky_accepts_the_tasks_and_rejects_a_broken_one(sky_python, tmp_path):
    tasks = {
        "gpu": skypilot.task(make_job("gpu-ddp-cifar", "skypilot", gpus_per_node=8)),
        "cpu": skypilot.task(make_job("cpu-ddp-cifar", "skypilot", nproc_per_node=4, env=("GLOO_SOCKET_IFNAME=eth0",))),
        "tpu": skypilot.task(make_job("tpu-mnist", "skypilot", nodes=4, options=dict(accelerators="tpu-v5e-16"))),
    }
    tasks["broken"] = {**tasks["cpu"], "num_nodes": "two"}
    paths = []
    for name, task in tasks.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml_text.dump(task))
        paths.append(str(path))
    done = subprocess.run(
        ["unshare", "--net", sky_python, "-c", CHECK, *paths], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    # SkyPilot logs to stdout too: the answer is the last line.
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    result = {os.path.basename(path)[:-5]: value for path, value in answer.items()}
    assert result["gpu"]["num_nodes"] == 2 and "'A100': 8" in result["gpu"]["resources"][0]
    assert "image_id=docker:envkit-cuda:latest" in result["gpu"]["resources"][0]
    assert result["cpu"]["num_nodes"] == 2 and "error" not in result["cpu"]
    assert result["cpu"]["envs"] == {
        "ENVKIT_IMAGE": "envkit-cpu:latest",
        "ENVKIT_EXPERIMENT": "cpu-ddp-cifar",
        "ENVKIT_TARGET": "cpu",
        "ENVKIT_DEVICE": "cpu",
        "GLOO_SOCKET_IFNAME": "eth0",
    }
    assert result["tpu"]["num_nodes"] == 4 and "tpu-v5e-16" in result["tpu"]["resources"][0]
    assert "error" in result["broken"]


def test_sky_python_missing_skips_or_fails_as_required(monkeypatch):
    monkeypatch.delenv("ENVKIT_SKY_PYTHON", raising=False)
    monkeypatch.setenv("ENVKIT_REQUIRE_SKY", "1")
    with pytest.raises(pytest.fail.Exception, match="ENVKIT_REQUIRE_SKY=1 but ENVKIT_SKY_PYTHON is not set"):
        sky_python.__wrapped__()
    monkeypatch.setenv("ENVKIT_REQUIRE_SKY", "0")
    with pytest.raises(pytest.skip.Exception, match="ENVKIT_SKY_PYTHON is not set"):
        sky_python.__wrapped__()

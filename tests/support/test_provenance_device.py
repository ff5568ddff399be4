"""The device a run really used (issue 32 §3): the run wrapper's site hook reports what torch initialised in each
Python process of the run, and the record says that, not the target's label."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from envkit.support import provenance

WRAPPER = Path(provenance.__file__)
# A stand-in torch whose CUDA was initialised on the first of two GPUs: the hook's questions, answered as a GPU
# host would (this host has none).
FAKE_TORCH = """
import types
class _Properties:
    def __init__(self, index):
        self.name, self.uuid = f"NVIDIA H100 80GB HBM3 #{index}", f"GPU-{index}"
cuda = types.SimpleNamespace(
    is_initialized=lambda: True, device_count=lambda: 2, current_device=lambda: 0,
    max_memory_allocated=lambda index: 1024 if index == 0 else 0, get_device_properties=_Properties,
)
"""


def wrapped(folder: Path, *argv: str, **env: str) -> tuple[subprocess.CompletedProcess, dict]:
    environment = {"PATH": os.environ["PATH"], "ENVKIT_RESULTS_DIR": str(folder / "results"), **env}
    done = subprocess.run(
        [sys.executable, str(WRAPPER), *argv], cwd=folder, env=environment, capture_output=True, text=True
    )
    (record,) = [json.loads(path.read_text()) for path in (folder / "results").glob("*.json")]
    return done, record


def test_a_gpu_targets_run_that_trained_on_the_cpu_is_recorded_as_a_cpu_run(tmp_path):
    body = "import torch\nprint(float((torch.ones(3) * 2).sum()))\n"
    (tmp_path / "train.py").write_text(body)
    done, record = wrapped(tmp_path, sys.executable, "train.py", ENVKIT_DEVICE="cuda")
    assert done.returncode == 0 and done.stdout == "6.0\n", done.stderr
    device = record["run"]["device"]
    assert device["observed"] and device["accelerator"] == "cpu" and device["label"] == "cuda"
    assert record["environment"]["device_type"] == "cpu" and record["environment"]["device_name"]
    assert record["run"]["warnings"] == ["the target says cuda, but the program initialised cpu: recorded as a cpu run"]


def test_a_cpu_stand_in_told_the_cpu_is_labelled_with_its_targets_device(tmp_path):
    # --allow-cpu: the program is told ENVKIT_DEVICE=cpu, and its record still says which target it stood in for
    done, record = wrapped(tmp_path, sys.executable, "-c", "pass", ENVKIT_DEVICE="cpu", ENVKIT_TARGET_DEVICE="cuda")
    assert done.returncode == 0, done.stderr
    assert (record["run"]["device"]["label"], record["environment"]["device_type"]) == ("cuda", "cpu")


def test_the_record_says_the_thread_budget_and_cpus_the_program_had(tmp_path):
    # issue 40 §5: a target's OMP_NUM_THREADS=1 as the program got it, torch's threads as it computed with them
    (tmp_path / "train.py").write_text("import torch\nprint(torch.get_num_threads())\n")
    done, record = wrapped(tmp_path, sys.executable, "train.py", OMP_NUM_THREADS="1")
    assert done.returncode == 0 and done.stdout == "1\n", done.stderr
    conditions = record["run"]["conditions"]
    assert (conditions["thread_variables"]["OMP_NUM_THREADS"], conditions["torch_threads"]) == ("1", [1])
    assert conditions["cpus"] == len(os.sched_getaffinity(0)) and 0 < conditions["usable_cpus"] <= conditions["cpus"]
    run = record["run"]
    assert 0 < conditions["cpu_share"] == round(run["cpu_time_s"] / (run["wall_time_s"] * conditions["usable_cpus"]), 3)
    schema = json.loads((Path(provenance.__file__).parents[1] / "data" / "results.schema.json").read_text())
    jsonschema.validate(record, schema)


def test_the_cuda_devices_a_program_used_are_named_from_torch(tmp_path):
    (tmp_path / "fake" / "torch").mkdir(parents=True)
    (tmp_path / "fake" / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (tmp_path / "train.py").write_text("import torch\n")
    done, record = wrapped(
        tmp_path, sys.executable, "train.py", ENVKIT_DEVICE="cuda", PYTHONPATH=str(tmp_path / "fake")
    )
    assert done.returncode == 0, done.stderr
    device = record["run"]["device"]
    assert (device["accelerator"], device["name"], device["count"]) == ("cuda", "NVIDIA H100 80GB HBM3 #0", 1)
    assert record["run"]["warnings"] == [] and record["environment"]["device_type"] == "cuda"


def test_torchrun_and_its_workers_report_and_a_program_that_is_not_python_is_not_observed(tmp_path):
    (tmp_path / "train.py").write_text("import torch, os\nassert os.environ['LOCAL_RANK'] in '01'\n")
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    # On loopback, as envkit starts torchrun: its rendezvous otherwise waits for this host's name, which need not
    # resolve (Debian 13's fresh machine: two 300 s timeouts, then failure).
    done, record = wrapped(
        tmp_path, torchrun, "--standalone", "--local-addr", "127.0.0.1", "--nproc-per-node", "2", "train.py"
    )
    assert done.returncode == 0, done.stderr
    assert record["run"]["device"]["python_processes"] == 3 and record["run"]["device"]["accelerator"] == "cpu"
    (tmp_path / "results" / record["run_name"]).with_suffix(".json").unlink()
    done, record = wrapped(tmp_path, "sh", "-c", "true", ENVKIT_DEVICE="cuda")
    assert not record["run"]["device"]["observed"] and record["environment"]["device_type"] == "cuda"
    assert record["run"]["warnings"] == []


def test_the_interpreters_own_sitecustomize_still_runs(tmp_path):
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITE'] = 'ran'\n")
    done, record = wrapped(
        tmp_path, sys.executable, "-c", "import os; print(os.environ.get('OWN_SITE'))", PYTHONPATH=str(tmp_path / "own")
    )
    assert done.stdout == "ran\n" and record["run"]["device"]["observed"]


@pytest.mark.parametrize("label", ["cpu", None])
def test_a_cpu_run_warns_of_nothing(tmp_path, label):
    done, record = wrapped(tmp_path, sys.executable, "-c", "pass", **({"ENVKIT_DEVICE": label} if label else {}))
    assert record["run"]["warnings"] == [] and record["run"]["device"]["accelerator"] == "cpu"


# A program that imports nothing and stands in a torch whose version string JSON must escape: each import of json
# or re from then on (the hook's at the program's exit included) is written to the file named by argv[1].
BARE_PROGRAM = """
import os, sys, types
threads = float(sys.argv[3]) if "." in sys.argv[3] else int(sys.argv[3])
sys.modules["torch"] = types.SimpleNamespace(__version__=sys.argv[2], get_num_threads=lambda: threads)
seen = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
watched = ("json", "re")
sys.addaudithook(lambda event, args: event == "import" and args[0] in watched and os.write(seen, args[0].encode()))
"""


@pytest.mark.parametrize("threads", ["3", "2.5"])
def test_the_hook_reports_in_json_without_importing_json_into_a_program_that_did_not(tmp_path, threads):
    """Issue 42: the report's `import json` at exit brought json, re and enum into a program that had none of them
    (a bare Python loop): about 8 ms of every such run. The report is JSON all the same, its strings escaped."""
    from envkit.support import provenance_device

    version = '2.9.0+"odd"\\\n\t\x01é\u2028\U0001f600'
    env = provenance_device.watched({"PATH": os.environ["PATH"]}, tmp_path, tmp_path / "dvclive")
    imported = tmp_path / "imported"
    done = subprocess.run(
        [sys.executable, "-c", BARE_PROGRAM, str(imported), version, threads], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert imported.read_text() == ""
    (report,) = provenance_device.process_reports(tmp_path)
    expected = {
        "torch": version,
        "prefix": sys.prefix,
        "executable": sys.executable,
        "torch_threads": json.loads(threads),
    }
    assert report == expected and type(report["torch_threads"]) is type(expected["torch_threads"])

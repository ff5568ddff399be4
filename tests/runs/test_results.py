"""The results contract is one file (envkit/data/results.schema.json): the recipes' output keeps it,
older versions upgrade into it, and the code and docs that name its facts agree with it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mnist_files import run_mnist
from paths import DATA, REPO_ROOT
from results_contract import assert_valid_results, contract_errors

from envkit.runs import results

SAMPLES = DATA / "results" / "mixed"
LOCK = "0123456789abcdef" * 4


def _sample(name: str) -> dict:
    return json.loads((SAMPLES / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def mnist_output(tmp_path_factory) -> Path:
    """What the current recipes/mnist.py writes: eager CPU, fake data, a few steps."""
    directory = tmp_path_factory.mktemp("results")
    done = run_mnist(
        "--dataset",
        "fake",
        "--epochs",
        "1",
        "--per-device-batch",
        "32",
        "--fake-train-size",
        "128",
        "--fake-test-size",
        "64",
        "--results-dir",
        directory,
        "--quiet",
        env={
            "ENVKIT_RESULTS_DIR": str(directory),
            "ENVKIT_LOCK_SHA256": LOCK,
            "ENVKIT_IMAGE_ID": "sha256:" + "ab" * 32,
            "ENVKIT_IMAGE_DIGEST": "sha256:" + "cd" * 32,
        },
        wrapped=True,  # as run.sh, the launch engines, the notebooks and envkit experiment start it
    )
    assert done.returncode == 0, done.stderr
    return directory / "mnist-cpu.json"


def test_mnist_output_keeps_the_contract(mnist_output):
    document = assert_valid_results(mnist_output)  # as written: the recipes write the current version
    assert document["schema_version"] == results.SCHEMA_VERSION
    assert document["environment"]["lock_sha256"] == LOCK
    # the wrapper's process facts beside the harness's torch facts, and the run id that tied them
    assert document["run_id"] == document["run"]["run_id"] and document["environment"]["distributions"]
    assert document["environment"]["device_count"] >= 1 and document["environment"]["host"]
    assert document["environment"]["image_id"] == "sha256:" + "ab" * 32
    assert document["environment"]["image_digest"] == "sha256:" + "cd" * 32
    assert document["configuration"]["nodes"] == 1 and document["configuration"]["backend"] is None
    assert results.upgrade(document) == (document, None)  # the current version is read as written


def test_a_recipe_run_without_the_wrapper_keeps_the_contract_with_what_torch_knows(tmp_path):
    """Started bare (python recipes/mnist.py), the record has no run block and no process facts: the harness
    records only what needs torch, the wrapper owns the rest."""
    done = run_mnist(
        *("--dataset", "fake", "--epochs", "1", "--per-device-batch", "32", "--fake-train-size", "64"),
        *("--results-dir", tmp_path, "--quiet"),
        env={"ENVKIT_RUN_ID": ""},
    )
    assert done.returncode == 0, done.stderr
    document = assert_valid_results(tmp_path / "mnist-cpu.json")
    assert "run" not in document and document["run_id"] is None
    assert set(document["environment"]) == {
        "device_type",
        "device_name",
        "device_count",
        "torch",
        "torchvision",
        "torch_xla",
        "torch_cuda_build",
    }
    result, _ = results.parse(tmp_path / "mnist-cpu.json", (tmp_path / "mnist-cpu.json").read_text())
    assert result.environment["host"] is None and result.environment["torch"] == document["environment"]["torch"]


def test_report_reads_the_mnist_output(mnist_output):
    result, note = results.parse(mnist_output, mnist_output.read_text(encoding="utf-8"))
    assert note is None and result.recipe == "mnist" and result.configuration["device"] == "cpu"


@pytest.mark.parametrize(
    "name, expected",
    [
        ("mnist-tpu8.json", {"nodes": 1, "processes_per_node": 8, "backend": "torch_xla"}),
        ("mnist-cuda.json", {"nodes": 1, "processes_per_node": 1, "backend": None}),
        ("mnist-legacy-v0.json", {"nodes": 1, "processes_per_node": 1, "backend": None, "strategy": None}),
    ],
)
def test_older_versions_upgrade_into_the_contract(name, expected):
    old = _sample(name)
    assert contract_errors(old)  # as written, an older file is not version 2
    document, note = results.upgrade(old)
    assert note is None and document["schema_version"] == results.SCHEMA_VERSION == 3
    assert_valid_results(document)
    assert {key: document["configuration"][key] for key in expected} == expected
    environment = document["environment"]
    assert (
        environment["lock_sha256"],
        environment["image_id"],
        environment["torch_tpu"],
        environment["distributions"],
    ) == (None, None, None, [])


def test_version_1_may_leave_out_what_may_be_null():
    document = _sample("mnist-cpu-a.json")
    for key in ("cores", "strategy", "image_size"):
        del document["configuration"][key]
    del document["environment"]["cuda"]  # version 1's name for torch_cuda_build
    upgraded, _ = results.upgrade(document)
    assert_valid_results(upgraded)
    assert upgraded["configuration"]["cores"] is None and upgraded["environment"]["torch_cuda_build"] is None


def test_version_2s_cuda_is_named_torch_cuda_build():
    document = json.loads((SAMPLES.parent / "backends" / "cifar-cuda-ddp.json").read_text(encoding="utf-8"))
    assert document["schema_version"] == 2 and document["environment"]["cuda"] == "13.0"
    upgraded, note = results.upgrade(document)
    assert note is None and assert_valid_results(upgraded)["environment"]["torch_cuda_build"] == "13.0"
    assert "cuda" not in upgraded["environment"]
    assert {**upgraded["environment"], "cuda": "13.0"} == {**document["environment"], "torch_cuda_build": "13.0"}


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda d: d["configuration"].pop("nodes"), "configuration: 'nodes' is a required property"),
        (lambda d: d["configuration"].update(backend="torch_xla"), "configuration.backend: None was expected"),
        (lambda d: d["configuration"].update(device="tpu", backend=None), "configuration.backend: None is not one of"),
        (lambda d: d["environment"].update(lock_sha256="abc"), "environment.lock_sha256: 'abc' does not match"),
        (
            lambda d: d["environment"].update(distributions=["Torch==2.14.1"]),
            "environment.distributions.0: 'Torch==2.14.1' does not match",
        ),
        (
            lambda d: d["environment"].update(distributions=["torch==2.14.1", "numpy==2.3.5"]),
            "environment.distributions: not sorted",
        ),
    ],
    ids=["nodes", "backend-off-tpu", "backend-on-tpu", "lock", "unnormalised", "unsorted"],
)
def test_contract_violations_are_named(change, problem):
    document, _ = results.upgrade(_sample("mnist-cpu-b.json"))
    change(document)
    problems = contract_errors(document)
    assert len(problems) == 1 and problems[0].startswith(problem)
    with pytest.raises(AssertionError, match="results break envkit/data/results.schema.json"):
        assert_valid_results(document)


def test_code_reads_its_facts_from_the_schema(tmp_path):
    """A copy of envkit whose schema says version 7, a third recipe and a new statistic: the code follows the file."""
    shutil.copytree(REPO_ROOT / "envkit", tmp_path / "envkit", ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / "envkit" / "data" / "results.schema.json"
    schema = json.loads(path.read_text(encoding="utf-8"))
    schema["properties"]["schema_version"]["const"] = 7
    schema["properties"]["recipe"]["enum"].append("imagenet")
    schema["properties"]["timing"]["properties"]["warmup_s"] = {"$ref": "#/$defs/stat"}
    path.write_text(json.dumps(schema), encoding="utf-8")
    probe = "from envkit.runs import results as r; print(r.SCHEMA_VERSION, r.KNOWN_RECIPES[-1], r.STAT_KEYS[-1])"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert done.stdout.split() == ["7", "imagenet", "warmup_s"]
    assert set(results.STAT_KEYS) == {"iter_s", "epoch_s", "steady_epoch_s", "train_epoch_s", "test_epoch_s"}
    # no second copy of the schema in Python
    assert "RESULTS_SCHEMA" not in (REPO_ROOT / "envkit" / "runs" / "results.py").read_text(encoding="utf-8")


def test_design_doc_points_to_the_schema_file():
    design = (REPO_ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    assert "envkit/data/results.schema.json" in design
    assert f"schema version {results.SCHEMA_VERSION}" in design
    # the field list lives in the schema only
    assert '"per_device_batch": int' not in design


NOT_OBJECTS = DATA / "results" / "not-objects"


@pytest.mark.parametrize(
    "name, found",
    [
        ("a-number.json", "it holds a number"),
        ("a-string.json", "it holds a string"),
        ("empty.json", "it is empty"),
        ("mnist-truncated.json", "not valid JSON, partial or malformed ("),
        ("notes.json", "it holds a list"),
        ("null.json", "it holds null"),
    ],
)
def test_a_file_that_holds_no_object_is_refused_naming_it_and_what_is_allowed(tmp_path, name, found):
    """Issue 25: a user's script writing its own JSON into ENVKIT_RESULTS_DIR is bad input, not a silent skip."""
    shutil.copy(NOT_OBJECTS / name, tmp_path / name)
    with pytest.raises(results.EnvkitError) as error:
        results.load_results(tmp_path)
    assert error.value.exit_code == 2
    assert str(error.value).startswith(f"{tmp_path / name} is not a results file ({found}")
    assert str(error.value).endswith(
        "a results directory holds only results files, each a JSON object (the run wrapper's record of a run, "
        "or a seed recipe's); move other files out of it (a program's own metrics go in ENVKIT_METRICS_DIR, "
        "its run's folder)"
    )
    # `envkit diff` names it as it did
    with pytest.raises(ValueError, match="not a results object|not valid JSON"):
        results.parse(tmp_path / name, (tmp_path / name).read_text())


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda d: d["environment"].update(distributions=["Torch==2.14.1"]), "environment.distributions.0: 'Torch"),
        (lambda d: d["environment"].update(distributions=["a==1", "a==1"]), "environment.distributions: ['a==1', "),
        (lambda d: d.update(series={"loss": {"step": [0, True], "value": [1.0, 2.0]}}), "series.loss.step.1: True"),
        (lambda d: d.update(series={"loss": {"step": [0, 1], "value": [1.0, "2"]}}), "series.loss.value.1: '2'"),
        (lambda d: d["run"].update(argv=["python", 3]), "run.argv.1: 3 is not of type 'string'"),
    ],
    ids=["pattern", "unique", "bool-step", "string-value", "argv"],
)
def test_long_arrays_checked_without_jsonschema_are_refused_by_its_message(change, problem):
    """The report checks a series' steps and values and the distributions in a plain loop (5,000 records took a
    minute in jsonschema); whatever that loop refuses is named by jsonschema's own message, as before."""
    document, _ = results.upgrade(_sample("mnist-cpu-b.json"))
    document["run"] = {
        "record_version": 1,
        "experiment": "mnist",
        "argv": ["python", "mnist.py"],
        "exit_status": 0,
        "started_at": "2026-11-25T22:00:00+00:00",
        "wall_time_s": 1.0,
    }
    assert results.schema_error(document) is None
    change(document)
    assert results.schema_error(document).startswith(problem)
    assert contract_errors(document)  # the contract's own check agrees


def test_a_record_left_running_elsewhere_is_read_as_running_or_lost_and_counted_not_hidden(tmp_path):
    """A run whose wrapper died (kill -9, docker kill) leaves the record of its start: on another host, or in a
    container (another PID namespace), whether it still runs cannot be told, and the report says so."""
    run = {
        "record_version": 1,
        "status": "running",
        "wrapper": {"host": "node-7", "boot_id": None, "pid_namespace": None, "pid": 1, "pid_started": None},
        "experiment": "train",
        "argv": ["python", "train.py"],
        "exit_status": None,
        "started_at": "2026-11-29T03:00:00+00:00",
        "wall_time_s": None,
    }
    environment = {"host": "node-7", "device_type": None, "device_name": None, "torch": None, "torch_xla": None}
    document = {"schema_version": 3, "run_name": "train-1", "run": run, "metrics": None, "environment": environment}
    assert contract_errors(document) == []
    assert any("exit_status" in line for line in contract_errors({**document, "run": {**run, "status": "ended"}}))
    (tmp_path / "train-1.json").write_text(json.dumps(document))
    (read,), warnings = results.load_results(tmp_path)
    assert read.state == "running or lost" and not read.succeeded
    assert read.outcome == "running or lost (its wrapper, pid 1 on node-7, left no end)"
    assert warnings == [
        f"{tmp_path / 'train-1.json'}: {read.outcome}: counted among the failed runs, left out of the numbers"
    ]


def test_a_seed_recipes_per_epoch_lists_are_its_series():
    """Issue 41 §1: before, the model kept no curve of a recipe's run and the page read its file again to draw one;
    now its per-epoch lists are series, as a command's per-step files are, and its row's curves the model's."""
    path = DATA / "results" / "e3" / "mnist-e3-batch-scaling-b128.json"
    metrics = json.loads(path.read_text(encoding="utf-8"))["metrics"]
    (run,) = [run for run in results.load_results(path.parent)[0] if run.path == path]
    assert run.series == {
        "loss": {"step": list(range(1, 11)), "value": metrics["epoch_loss"]},
        "test_accuracy": {"step": list(range(1, 11)), "value": metrics["epoch_test_accuracy"]},
    }

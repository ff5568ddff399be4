"""envkit as a user has it (issue 25 §1 and §9): the wheel built from this checkout, installed into a fresh
virtual environment outside it, takes tests/example_project (a user's repository, nothing of this one's)
from `envkit init` through its locks and its render, in a temporary directory. Nothing of the checkout is on
that envkit's path, and nothing is edited in its site-packages.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import paths
import pytest
from xla_env import environment_missing

REPO = paths.REPO_ROOT
EXAMPLE = paths.TESTS / "example_project"


def run(argv: list[str], cwd: Path, timeout: int = 900, **env: str) -> subprocess.CompletedProcess:
    # No PYTHONPATH and a neutral working directory: the tool must not see this checkout.
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | env
    return subprocess.run(argv, cwd=cwd, env=clean, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def tool(tmp_path_factory) -> Path:
    """``bin/envkit`` of a fresh venv holding only the built wheel and its dependencies."""
    work = tmp_path_factory.mktemp("tool")
    source = work / "source"  # a clean copy: the wheel is built from the committed and working files alone
    skipped = shutil.ignore_patterns(".venv*", ".git", ".cache", "__pycache__", "*.egg-info", "build")
    # results/ and data/ at the top are runs' output; envkit/data/ is the package's own
    top = {"results", "data"}
    shutil.copytree(
        REPO,
        source,
        ignore=lambda folder, names: skipped(folder, names) | (top & set(names) if Path(folder) == REPO else set()),
    )
    built = run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(work / "dist"),
            str(source),
        ],
        work,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((work / "dist").glob("envkit_hw-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"envkit/templates/Dockerfile.j2", "envkit/templates/run.sh.j2", "envkit/templates/init/envkit.mk"} <= names
    assert "envkit/data/kinds.yaml" in names and not any(n.startswith("envkit/data/experiments.y") for n in names)
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    venv = work / "venv"
    assert run([uv, "venv", "--python", sys.executable, str(venv)], work).returncode == 0
    installed = run([uv, "pip", "install", "--python", str(venv / "bin" / "python"), str(wheel)], work)
    assert installed.returncode == 0, installed.stderr[-2000:]
    return venv / "bin" / "envkit"


@pytest.fixture(scope="module")
def local_index(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """A local stand-in for PyTorch's index (torch 2.13.0's CPU build, the only torch this machine has offline) and
    the uv cache the tests' venvs share: uv keys torch by the index's path, so one index and one cache unpack torch
    (700 MB) once for every venv of the module, not once per venv into the user's cache."""
    import offline_lock

    work = tmp_path_factory.mktemp("torch-index")
    try:
        return offline_lock.torch_index(work / "index"), {"UV_CACHE_DIR": str(work / "uv")}
    except offline_lock.OfflineLockError as exc:  # a machine without the local torch wheels: CI has them
        environment_missing(
            f"no local torch 2.13.0 CPU wheel for the stand-in index: {exc}", "ENVKIT_REQUIRE_TORCH_WHEELS"
        )


@pytest.mark.slow
def test_a_users_repository_from_init_to_its_locks_and_render(tool, tmp_path):
    project = tmp_path / "mine"
    shutil.copytree(EXAMPLE, project)
    # The user's pin (init's default is the newest torch every default target has): the locks below are 2.9.0's.
    requirements = project / "requirements.txt"
    requirements.write_text(requirements.read_text().replace("torch>=2.9", "torch==2.9.0"))
    envkit = str(tool)
    done = run([envkit, "init"], project)
    assert done.returncode == 0, done.stderr
    assert not (project / "templates").exists()  # the templates are the installed envkit's
    for target in ("cuda", "tpu-vm"):
        locked = run([envkit, "lock", "--target", target], project, timeout=1800)
        assert locked.returncode == 0, locked.stderr
        lock = (project / "docker" / target / "requirements.lock").read_text()
        assert "tabulate==0.9.0" in lock and "torch==2.9.0" in lock and "--hash=sha256:" in lock
    rendered = run([envkit, "render", "--all"], project)
    assert rendered.returncode == 0, rendered.stderr
    assert (
        "tabulate" in (project / "docker" / "cuda" / "Dockerfile").read_text()
        or "requirements.lock" in (project / "docker" / "cuda" / "Dockerfile").read_text()
    )
    assert run([envkit, "render", "--all", "--check"], project).returncode == 0
    listed = run([envkit, "experiment", "--list"], project)
    assert listed.stdout.split() == ["ddp", "train", "train-dvclive"]
    planned = run(["make", "-s", "train", "TARGET=cuda", f"ENVKIT={envkit}", "DRY_RUN=1"], project)
    assert planned.returncode == 0 and "experiment train" in planned.stdout, planned.stderr
    assert "build the cuda image" in planned.stdout
    # Its notebook for Colab's T4: the colab-t4 lock (the user's tabulate in it), the user's files embedded by
    # sha256, the command run from the project's root. tests/integration/test_notebook_execute.py executes such a
    # notebook in CPU mode (CPU mode's wheelhouse has no tabulate, so this one is validated, not run).
    locked = run([envkit, "lock", "--target", "colab-t4"], project, timeout=1800)
    assert locked.returncode == 0, locked.stderr
    written = run([envkit, "notebook", "train", "--target", "colab-t4"], project)
    assert written.returncode == 0, written.stderr
    notebook = nbformat.read(project / "train.ipynb", as_version=4)
    nbformat.validate(notebook)
    text = "\n".join(cell.source for cell in notebook.cells)
    assert "train.py" in text and hashlib.sha256((EXAMPLE / "train.py").read_bytes()).hexdigest() in text


# A cpu target the engine can build here: torch 2.13.0's CPU build from a local stand-in for PyTorch's index
# (the only torch this machine has offline), on the debootstrap'd base, as CI's own cpu image is built. The user's
# requirements (torch>=2.9, tabulate) resolve into its lock as into every other target's.
LOCAL_TARGET = {"kind": "cpu", "torch": "2.13.0", "python": "3.11", "torchvision": False, "platforms": ["linux/amd64"]}
LOCAL_EXPERIMENT = {
    "summary": "train.py on the local cpu target",
    "target": "cpu-local",
    "command": ["python", "train.py"],
}
# A second cpu-kind target with other settings: one experiment, two targets' venvs on this host, two report rows.
LEAN_TARGET = {**LOCAL_TARGET, "shm_size": "1g", "env": {"OMP_NUM_THREADS": "1"}}
# The MNIST example's test line, as envkit.yaml's metrics patterns read it (envkit/project/metric_patterns.py).
METRICS = {"patterns": {"accuracy": r"Accuracy: \d+/\d+ \((\d+%)\)", "test_loss": r"Average loss: ([0-9.]+)"}}


@pytest.fixture(scope="module")
def user_project(tool, local_index, tmp_path_factory) -> Path:
    """The example as a user's git repository after `envkit init`, with two cpu-kind targets the engine can build
    here (cpu-local, cpu-lean) locked, rendered and each made a venv: the image test and the two-targets test both
    run on it, so each target's venv (torch's 700 MB unpacked and byte-compiled) is made once for the module."""
    import yaml

    project = tmp_path_factory.mktemp("user") / "mine"
    shutil.copytree(EXAMPLE, project)
    (project / "data").mkdir()
    (project / "data" / "points.bin").write_bytes(b"\0" * 1024)  # untracked data: never in the image
    for argv in (
        ["init", "-q"],
        ["add", "-A", ":!data"],
        ["-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "mine"],
    ):
        assert run(["git", *argv], project).returncode == 0
    envkit = str(tool)
    assert run([envkit, "init"], project).returncode == 0
    config = yaml.safe_load((project / "envkit.yaml").read_text())
    config["targets"].update({"cpu-local": LOCAL_TARGET, "cpu-lean": LEAN_TARGET})
    config["experiments"]["local-train"] = {**LOCAL_EXPERIMENT, "args": ["--epochs", "2"]}
    train = config["experiments"]["train"]
    train.update(targets=[*train["targets"], "cpu-local", "cpu-lean"], args=["--epochs", "2"], metrics=METRICS)
    config["experiments"]["ddp"]["targets"].append("cpu-local")  # init's scale: torchrun experiment, in the image
    (project / "envkit.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    index, uv_cache = local_index
    no_engine = {"DOCKER_HOST": f"unix://{project}/no-engine.sock"}  # the lock must not ask a registry for the base
    for target in ("cpu-local", "cpu-lean"):
        locked = run([envkit, "lock", "--target", target, "--torch-index-url", index], project, 1800, **no_engine)
        assert locked.returncode == 0, locked.stderr
        lock = (project / "docker" / target / "requirements.lock").read_text()
        assert "tabulate==0.9.0" in lock and "torch==2.13.0" in lock
        # A host run on the same lock: its venv, from which the tests run the command through the wrapper.
        venv = run([envkit, "venv", target, "--torch-index-url", index], project, 1800, **uv_cache)
        assert venv.returncode == 0, venv.stderr[-2000:]
    assert run([envkit, "render", "--all"], project).returncode == 0
    return project


@pytest.mark.slow
def test_a_users_experiment_runs_in_its_image_and_on_a_host_lock_then_reports_and_launches(
    tool, user_project, tmp_path, client, base_image
):
    import offline_lock
    from docker_engine import HOST_CA_BUNDLE

    project, envkit = user_project, str(tool)
    lock = project / "docker" / "cpu-local" / "requirements.lock"
    wheels = offline_lock.fill_wheelhouse(lock, tmp_path / "wheels")

    # The image: its build, then the run through run.sh and the run wrapper, from the project's root in the image.
    trust = ["--ca-cert", str(HOST_CA_BUNDLE)] if HOST_CA_BUNDLE.is_file() else []
    results = tmp_path / "results"
    build = ["--base-image", base_image, "--wheelhouse", str(wheels), *trust]
    done = run([envkit, "experiment", "local-train", "--results-dir", str(results), *build], project, 1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "device=cpu" in done.stdout + done.stderr
    (record,) = [json.loads(path.read_text()) for path in results.glob("*.json")]
    assert record["run"]["experiment"] == "local-train" and record["run"]["exit_status"] == 0
    assert record["run"]["argv"] == ["python", "train.py", "--epochs", "2"]
    assert record["environment"]["image_id"].startswith("sha256:") and record["environment"]["lock_sha256"]
    image = client.images.get("envkit-cpu-local:latest")
    listed = client.containers.run(image, ["find", ".", "-type", "f"], remove=True).decode().split()
    # git's files; not data/
    assert sorted(listed) == ["./README.md", "./ddp.py", "./requirements.txt", "./train.py", "./train_dvclive.py"]
    # The DDP script in the same image starts under torchrun, two gloo processes (issue 32 §7; before, run.sh ran
    # it as plain python: KeyError: 'LOCAL_RANK').
    ddp = run(
        [envkit, "experiment", "ddp", "--target", "cpu-local", "--results-dir", str(tmp_path / "ddp"), *build], project
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    assert "rank 0 of 2: sum=3.0" in ddp.stdout and "rank 1 of 2: sum=3.0" in ddp.stdout, ddp.stdout

    # A host run on the same lock (the fixture made its venv): the command from the project's root through the wrapper.
    host = project / ".venv-cpu-local" / "bin" / "python"
    done = run([envkit, "experiment", "local-train", "--python", str(host), "--results-dir", str(results)], project)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(path.read_text()) for path in results.glob("*.json")]
    assert len(records) == 2 and len({r["environment"]["lock_sha256"] for r in records}) == 1

    # The report compares the two runs of the experiment; every engine plans its launch.
    report = run([envkit, "report", str(results)], project)
    assert report.returncode == 0 and "local-train" in report.stdout, report.stderr
    for engine, name, extra in [
        ("hosts", "train", ["--target", "cuda"]),
        ("slurm", "train", ["--target", "cuda"]),
        ("pytorchjob", "train", ["--target", "cuda"]),
        ("skypilot", "train", ["--target", "cuda"]),
        ("tpu-pod", "train", ["--target", "tpu-vm", "--tpu", "my-tpu", "--zone", "us-central2-b"]),
    ]:
        planned = run([envkit, "launch", name, "--on", engine, "--dry-run", *extra], project)
        assert planned.returncode == 0, (engine, planned.stderr)
        assert "recipes/" not in planned.stdout and "train.py" in planned.stdout, (engine, planned.stdout)


@pytest.mark.slow
def test_one_experiment_on_two_cpu_targets_venvs_is_one_comparison_then_torchrun_ddp_and_a_gpu_run_refused(
    tool, user_project, tmp_path
):
    """Issue 32's tests, host only (no engine): the example's train.py on two cpu-kind targets' venvs (the fixture's
    init, locks, render and venvs) through `envkit experiment --target T --python`, its printed test line read as
    metrics, the report's one comparison with a row per target; ddp.py under torchrun on 2 gloo processes; a cuda run
    refused in one line."""
    project, envkit = user_project, str(tool)
    results = tmp_path / "results"
    no_engine = {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}  # nothing here needs one
    for target in ("cpu-local", "cpu-lean"):
        python = f".venv-{target}/bin/python"
        argv = ["experiment", "train", "--target", target, "--python", python, "--results-dir", str(results)]
        done = run([envkit, *argv], project, **no_engine)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "Test set: Average loss: " in done.stdout
    records = {r["run"]["target"]: r for r in (json.loads(path.read_text()) for path in results.glob("*.json"))}
    assert sorted(records) == ["cpu-lean", "cpu-local"]
    for record in records.values():
        assert record["run"]["experiment"] == "train" and record["run"]["argv"][-2:] == ["--epochs", "2"]
        assert 0 < record["metrics"]["accuracy"] <= 1 and record["metrics"]["test_loss"] >= 0
        assert record["run"]["device"]["accelerator"] == "cpu" and record["environment"]["torch"].startswith("2.13.0")

    # One comparison: a row per target, each with the metric its output printed.
    report = run([envkit, "report", str(results)], project)
    assert report.returncode == 0, report.stderr
    assert report.stdout.count("## experiment train") == 1, report.stdout
    table = [line for line in report.stdout.splitlines() if line.startswith("| cpu-l")]
    assert sorted(line.split("|")[1].strip() for line in table) == ["cpu-lean", "cpu-local"], report.stdout
    header = next(line for line in report.stdout.splitlines() if line.startswith("| where "))
    assert "accuracy" in header and "test_loss" in header, header

    # The DDP script, which reads LOCAL_RANK, under torchrun on 2 gloo processes: the record says so.
    python = ".venv-cpu-local/bin/python"
    done = run(
        [envkit, "experiment", "ddp", "--target", "cpu-local", "--python", python, "--results-dir", str(results)],
        project,
        **no_engine,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0 of 2: sum=3.0" in done.stdout and "rank 1 of 2: sum=3.0" in done.stdout, done.stdout
    (record,) = [
        r for r in (json.loads(path.read_text()) for path in results.glob("*.json")) if r["run"]["experiment"] == "ddp"
    ]
    assert record["run"]["exit_status"] == 0 and record["run"]["target"] == "cpu-local"
    assert "torch.distributed.run" in record["run"]["argv"] and record["run"]["argv"][-1] == "ddp.py"
    assert record["run"]["argv"][record["run"]["argv"].index("--nproc-per-node") + 1] == "2"
    assert record["run"]["device"]["python_processes"] >= 2

    # The GPU experiment on this GPU-less host: refused before it starts, in one line naming the CPU stand-in's flag.
    refused = run(
        [envkit, "experiment", "train", "--target", "cuda", "--python", python, "--results-dir", str(results)],
        project,
        **no_engine,
    )
    assert (refused.returncode, refused.stdout, refused.stderr.count("\n")) == (2, "", 1), refused.stderr
    assert "--allow-cpu" in refused.stderr and "Traceback" not in refused.stderr
    assert len(list(results.glob("*.json"))) == 3

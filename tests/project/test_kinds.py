"""Target kinds as data (envkit/data/kinds.yaml + templates/kinds/<kind>.run.sh.j2).

The proof that a kind is data: a copy of the project gains a ROCm kind through
kinds.yaml and a template fragment only (plus a target and an experiment, also data),
and that kind renders, is listed, gets a dry-run plan and is reported by doctor,
while every Python file stays byte-identical.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator
from linters import linter
from paths import REPO_ROOT

from envkit.errors import EnvkitError
from envkit.project import kinds
from envkit.project.document import schema
from envkit.support import provenance

ROCM_KIND = """\
  rocm:
    summary: AMD GPUs through ROCm
    wheels: cpu
    base_image: python
    keys: []
    device: cuda
    host:
      check: devices
      name: rocm
      globs: [/dev/kfd]
      missing: "no ROCm devices (/dev/kfd) found: rocm-* targets need an AMD GPU host"
    run:
      user: caller
      shm_size: 8g
      docker_args: [--device=/dev/kfd, --device=/dev/dri, --group-add, video]
    launch:
      accelerator: gpus
      cdi_device: amd.com/gpu
      kubernetes_resource: amd.com/gpu
"""
ROCM_FRAGMENT = """\
{# rocm: the device nodes and the video group are in envkit/data/kinds.yaml. #}
{% extends "run.sh.j2" %}
{% block run_comment %}
  # /dev/kfd is the ROCm compute interface, /dev/dri the GPUs; the video group may open them.
{% endblock %}
"""
ROCM_EXPERIMENT = """\
  rocm-ddp-cifar:
    summary: CIFAR-10 with DDP over AMD GPUs
    title: "cifar, DDP over {gpus} AMD GPUs"
    kind: rocm
    recipe: cifar
    args: [--device, cuda, --parallel, ddp]
    gpus: all
    scale: torchrun
    published: null
  rocm-mnist:
    summary: MNIST on one AMD GPU
    title: "mnist on one AMD GPU"
    kind: rocm
    recipe: mnist
    args: [--device, cuda]
    gpus: none
    scale: single
    published: null
"""


def test_the_shipped_kinds():
    assert kinds.names() == ["cpu", "cuda", "tpu-vm"]
    tpu = kinds.kind("tpu-vm")
    assert (tpu.run.user, tpu.run.host_network, tpu.run.env) == ("root", True, {"PJRT_DEVICE": "TPU"})
    assert kinds.kind("cuda").run.ulimits == {"memlock": "-1", "stack": "67108864"}


def test_a_kinds_missing_device_hint_names_no_experiment_of_this_repository(repo_root):
    # The hint reaches users' projects too, where this repository's seed experiments (cpu-mnist, ...) do not exist.
    seeds = yaml.safe_load((repo_root / "envkit.yaml").read_text())["experiments"]
    hints = {name: kinds.kind(name).host.missing for name in kinds.names() if kinds.kind(name).host.missing}
    assert seeds and hints
    for name, hint in hints.items():
        assert "--target cpu" in hint, name
        assert not [seed for seed in seeds if seed in hint], (name, hint)


def test_every_kind_has_its_run_sh_fragment(repo_root):
    assert kinds.names(), "kinds.yaml names no kind"
    for name in kinds.names():
        assert (repo_root / "templates" / "kinds" / f"{name}.run.sh.j2").is_file(), name


def test_the_config_schema_takes_its_kinds_from_the_data(repo_root):
    """The enum the config is validated with is kinds.yaml's keys, read here without envkit's loader."""
    table = yaml.safe_load((repo_root / "envkit" / "data" / "kinds.yaml").read_text())
    assert (
        schema()["$defs"]["target"]["properties"]["kind"]["enum"] == list(table["kinds"]) == ["cpu", "cuda", "tpu-vm"]
    )
    shipped = json.loads((repo_root / "envkit" / "data" / "envkit.schema.json").read_text())
    assert "enum" not in shipped["$defs"]["target"]["properties"]["kind"], "no second list of kinds in the schema file"


def test_unknown_kind_is_one_line():
    with pytest.raises(EnvkitError, match="unknown target kind 'rocm': choose from cpu, cuda, tpu-vm"):
        kinds.kind("rocm")


def test_the_shipped_kinds_follow_their_schema():
    """kinds.yaml is checked here, in CI, and not at every run (issue 42)."""
    schema = json.loads(kinds.SCHEMA_PATH.read_text())
    Draft202012Validator.check_schema(schema)
    assert list(Draft202012Validator(schema).iter_errors(yaml.safe_load(kinds.KINDS_PATH.read_text()))) == []
    broken = yaml.safe_load(kinds.KINDS_PATH.read_text().replace("user: root", "user: admin"))
    assert [error.message for error in Draft202012Validator(schema).iter_errors(broken)] == [
        "'admin' is not one of ['caller', 'root']"
    ]


def python_files(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((root / "envkit").rglob("*.py"))
    }


@pytest.fixture
def rocm_project(tmp_path, repo_root):
    """A copy of the project that knows a rocm kind from data and a template fragment alone."""
    project = tmp_path / "project"
    project.mkdir()
    for part in ("envkit", "templates", "recipes", "notebooks", "envkit.yaml"):
        copy = shutil.copytree if (repo_root / part).is_dir() else shutil.copy
        copy(
            repo_root / part,
            project / part,
            **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}),
        )
    with open(project / "envkit" / "data" / "kinds.yaml", "a", encoding="utf-8") as table:
        table.write(ROCM_KIND)
    (project / "templates" / "kinds" / "rocm.run.sh.j2").write_text(ROCM_FRAGMENT)
    config = (project / "envkit.yaml").read_text(encoding="utf-8")
    config = config.replace("\nexperiments:\n", "\nexperiments:\n" + ROCM_EXPERIMENT, 1)
    (project / "envkit.yaml").write_text(config + '\n  rocm:\n    kind: rocm\n    torch: "2.9.0"\n', encoding="utf-8")
    return project


def test_the_no_python_edited_check_sees_an_edit_and_a_new_file(rocm_project, repo_root):
    """The check the rocm test ends with can fail: a one-byte edit, or a new module, changes its answer."""
    assert python_files(rocm_project) == python_files(repo_root)
    kinds_py = rocm_project / "envkit" / "project" / "kinds.py"
    kinds_py.write_text(kinds_py.read_text() + " ")
    (rocm_project / "envkit" / "project" / "rocm.py").write_text("")
    before, after = python_files(repo_root), python_files(rocm_project)
    assert sorted(name for name in after if before.get(name) != after[name]) == [
        "envkit/project/kinds.py",
        "envkit/project/rocm.py",
    ]


def envkit(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(project), "DOCKER_HOST": f"unix://{project}/no.sock", **env}
    return subprocess.run(
        [sys.executable, "-m", "envkit", *args], cwd=project, capture_output=True, text=True, env=environment
    )


def test_a_rocm_kind_from_data_and_a_fragment_alone(rocm_project):
    project = rocm_project
    # renders, with the kind's flags in its run.sh
    done = envkit(project, "render", "--all")
    assert done.returncode == 0, done.stderr
    each = 3 + len(provenance.shipped())  # 3 templates and the run wrapper's files, per kind
    assert f"rendered {4 * each} files for cpu, cuda, tpu-vm, rocm" in done.stdout
    run_sh = project / "docker" / "rocm" / "run.sh"
    dry = subprocess.run(
        [str(run_sh), "python", "recipes/mnist.py", "--device", "cuda"],
        capture_output=True,
        text=True,
        cwd=project,
        env={"PATH": os.environ["PATH"], "ENVKIT_DRY_RUN": "1", "RESULTS_DIR": "/r", "DATA_DIR": "/d"},
    )
    assert dry.returncode == 0, dry.stderr
    owner = f"{os.getuid()}:{os.getgid()}"
    assert shlex.split(dry.stdout)[:14] == [
        "docker",
        "run",
        "--rm",
        "--init",
        "--user",
        owner,
        "-e",
        "HOME=/tmp",
        "--device=/dev/kfd",
        "--device=/dev/dri",
        "--group-add",
        "video",
        "--shm-size",
        "8g",
    ]
    assert "USER 10001:10001" in (project / "docker" / "rocm" / "Dockerfile").read_text()

    # appears in `envkit targets`
    done = envkit(project, "targets")
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("rocm "))
    assert row.split()[:3] == ["rocm", "rocm", "python:3.11-slim-bookworm"]

    # gets a dry-run plan
    done = envkit(project, "experiment", "--dry-run", "--results-dir", "/r", "rocm-mnist", "--", "--epochs", "1")
    assert done.returncode == 0, done.stderr
    plan = [line for line in done.stdout.splitlines() if not line.startswith("#")]
    assert plan == [
        f"{sys.executable} -m envkit doctor --require rocm",
        f"{sys.executable} -m envkit build rocm",
        "RESULTS_DIR=/r ENVKIT_EXPERIMENT=rocm-mnist docker/rocm/run.sh python recipes/mnist.py --device cuda --epochs 1",
    ]

    # is reported by doctor, its device check from the data
    done = envkit(project, "doctor")
    assert done.returncode == 0, done.stderr
    assert "rocm devices    " in done.stdout and "rocm-mnist" in done.stdout
    report = json.loads(envkit(project, "doctor", "--json").stdout)
    assert report["rocm_devices"] == [path for path in ["/dev/kfd"] if os.path.exists(path)]
    done = envkit(project, "doctor", "--require", "rocm")
    assert done.returncode == 2 and done.stderr.startswith("envkit: error: this host cannot run rocm images: ")
    probe = (
        "from envkit.host import doctor; facts = doctor.HostFacts(docker_version='x');"
        "print(doctor.kind_problem(facts, 'rocm')); facts.devices['rocm'] = ['/dev/kfd'];"
        "print(doctor.kind_problem(facts, 'rocm'), doctor.runnable_experiments(facts)[-1])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(project)},
    )
    assert done.stdout.splitlines() == [
        "no ROCm devices (/dev/kfd) found: rocm-* targets need an AMD GPU host",
        "None rocm-mnist",
    ], done.stderr
    # launches: the engines that ask a node for GPUs take it, the GPUs named by the kind's data
    done = envkit(project, "launch", "rocm-ddp-cifar", "--on", "pytorchjob", "--gpus-per-node", "2", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "image: envkit-rocm:latest" in done.stdout and "amd.com/gpu: 2" in done.stdout
    assert "nvidia" not in done.stdout and "value: cuda" in done.stdout  # ENVKIT_DEVICE, the kind's device
    done = envkit(project, "launch", "rocm-ddp-cifar", "--on", "slurm", "--gpus-per-node", "2", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert 'devices+=(--device "amd.com/gpu=$id")' in done.stdout and "--shm-size 8g" in done.stdout
    done = envkit(project, "launch", "rocm-mnist", "--on", "tpu-pod", "--dry-run")
    assert (done.returncode, done.stderr) == (
        2,
        "envkit: error: --on tpu-pod runs tpu-vm experiments, and rocm-mnist is a rocm experiment; "
        "engines for it: hosts, slurm, pytorchjob, jobset, skypilot\n",
    )
    assert python_files(project) == python_files(REPO_ROOT)


def test_the_rocm_run_sh_passes_shellcheck(rocm_project):
    assert envkit(rocm_project, "render", "--target", "rocm").returncode == 0
    done = subprocess.run(
        [linter("shellcheck"), str(rocm_project / "docker" / "rocm" / "run.sh")], capture_output=True, text=True
    )
    assert (done.returncode, done.stdout) == (0, "")


def test_kind_only_keys_come_from_the_data(tmp_path, rocm_project):
    config = yaml.safe_load((rocm_project / "envkit.yaml").read_text())
    config["targets"]["rocm"]["gpus"] = [0]
    (rocm_project / "envkit.yaml").write_text(yaml.safe_dump(config))
    done = envkit(rocm_project, "render", "--all")
    assert done.returncode == 2 and "'gpus' applies to cuda targets only, not rocm" in done.stderr

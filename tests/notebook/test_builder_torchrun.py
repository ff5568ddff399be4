"""A ``scale: torchrun`` experiment's notebook starts its script under torchrun (issue 32 §7), one process per GPU of
the notebook's accelerator, one on a TPU (envkit.runs.plans says why). Before, the run cell ran ``python ddp.py``
as plain python: tests/example_project's ddp.py then failed with KeyError: 'LOCAL_RANK'."""

from __future__ import annotations

import ast
import json
import shutil
import sys
from pathlib import Path

import nbformat
import paths
import pytest
from command_project import command_project, git

from envkit.notebook import builder, runtime, runtime_shared
from envkit.project.load import load_config

TORCHRUN = ["python", "-m", "torch.distributed.run", "--standalone", "--local-addr", "127.0.0.1", "--nproc-per-node"]
DDP = """  gpu-ddp:
    summary: the tutorial's DDP script, one process per GPU
    kind: cuda
    command: [python, ddp.py]
    scale: torchrun
  tpu-ddp:
    summary: the tutorial's DDP script on a TPU host
    kind: tpu-vm
    command: [python, ddp.py]
    scale: torchrun
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """tests/command_project.py's project with example_project's ddp.py as two torchrun experiments, committed."""
    root = command_project(tmp_path_factory.mktemp("torchrun") / "project")
    shutil.copy(paths.TESTS / "example_project" / "ddp.py", root / "ddp.py")
    config = root / "envkit.yaml"
    config.write_text(config.read_text().replace("experiments:\n", "experiments:\n" + DDP, 1))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "ddp")
    return root


def render(project: Path, experiment: str, target: str) -> nbformat.NotebookNode:
    return nbformat.reads(builder.render_notebook(load_config(project / "envkit.yaml"), experiment, target).text, 4)


def settings_of(notebook: nbformat.NotebookNode) -> dict:
    cell = ast.parse(next(cell for cell in notebook.cells if cell.id == "settings").source)
    return ast.literal_eval(next(node.value for node in cell.body if isinstance(node, ast.Assign)))


@pytest.mark.parametrize(
    ("experiment", "target", "processes"),
    # colab-t4: its one T4; colab-tpu (v5e-1) and kaggle-tpu (8 v5e chips): one process, which takes every chip
    [("gpu-ddp", "colab-t4", "1"), ("tpu-ddp", "colab-tpu", "1"), ("tpu-ddp", "kaggle-tpu", "1")],
)
def test_the_run_cell_starts_the_script_under_torchrun(project, experiment, target, processes):
    notebook = render(project, experiment, target)
    settings = settings_of(notebook)
    assert (settings["program"], settings["root"]) == ([*TORCHRUN, processes, "ddp.py"], "project")
    # what the reader is told runs is what runs; the script is still the visible cell
    assert f"`{' '.join([*TORCHRUN, processes, 'ddp.py'])}`" in notebook.cells[0].source
    assert [c.source.split("\n", 1)[0] for c in notebook.cells if c.source.startswith("%%writefile ")] == [
        "%%writefile project/ddp.py"
    ]


def test_a_single_process_command_runs_as_it_did(project):
    assert settings_of(render(project, "gpu-train", "colab-t4"))["program"] == ["python", "train.py", "--epochs", "2"]


@pytest.mark.slow
def test_the_notebooks_run_cell_runs_the_ddp_script_under_torchrun_on_the_cpu(project, tmp_path, monkeypatch, capfd):
    """CPU mode (what a machine without accelerators runs): the settings and files cells, then run_program with this
    interpreter's torch; torchrun starts the one process, which joins its gloo group and writes its record."""
    work = tmp_path / "work"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENVKIT_NOTEBOOK_WORK", str(work))
    notebook = render(project, "gpu-ddp", "colab-t4")
    namespace: dict = {}
    for cell in notebook.cells:
        if cell.id in ("settings", "files"):
            exec(cell.source, namespace)  # standard library only; the settings cell moves into work
        elif cell.source.startswith("%%writefile "):  # IPython's magic: the cell's body, exactly
            head, body = cell.source.split("\n", 1)
            (work / head.split(maxsplit=1)[1]).write_text(body)
    settings = namespace["SETTINGS"]
    runtime.check_files(settings, "program")
    monkeypatch.setenv(runtime_shared.CPU_MODE, str(tmp_path))
    environment = {"python": sys.executable, "packages": "runtime", "lock_sha256": "0" * 64}
    environment |= {"installer": None, "lock_differences": None}
    found = {"found": "no accelerator (CPU only)", "python": "3", "version": {}, "packages": {}}
    [path] = runtime.run_program(settings, environment, found)
    out = capfd.readouterr().out
    assert f"$ {' '.join([*TORCHRUN, '1', 'ddp.py'])}   (in project/)" in out
    assert "rank 0 of 1: sum=1.0" in out, out
    record = json.loads(path.read_text())
    assert (record["run"]["experiment"], record["run"]["exit_status"]) == ("gpu-ddp", 0)

"""Every committed notebook, executed for real with nbclient and ipykernel on this machine's CPU.

CPU mode (ENVKIT_NOTEBOOK_CPU) is what these tests select; what is real and what is not:

- real: the committed notebooks, cell for cell, in a fresh kernel; every embedded file
  written (the recipe by its %%writefile cell, the others unpacked from the archive cell)
  and checked against its sha256; a fresh virtual
  environment made by uv and filled with --require-hashes, offline; the recipe running
  in that interpreter with its progress streamed; the results JSON with the notebook's
  block, checked against the results schema; envkit's embedded report and plot;
  the results file in the output folder.
- not the platform's: the lock installed is a CPU lock that the fixture below resolves
  with uv from a local wheelhouse (torch 2.13.0's CPU build, from local disk, and its
  dependencies), not the target's committed lock (PyPI's torch and torch_xla, about
  4 GB, for the runtime's Python); the accelerator check only records what it finds;
  the recipe takes the notebook's CPU arguments (a few steps on generated data).
  Nothing reaches Colab or Kaggle.

Cost: about 10-30 s per notebook (kernel, venv, install from uv's cache, four steps),
under two minutes for all of them; the wheelhouse takes about 200 MB.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import nbformat
import pytest
from command_project import command_project
from notebook_cpu import build_wheelhouse, execute
from paths import DATA
from xla_env import environment_missing

from envkit.cli import main
from envkit.notebook import builder, runtime_shared, runtime_venv
from envkit.project.load import load_config
from envkit.project.output import Output

pytestmark = pytest.mark.slow
IMAGE_RESULT = DATA / "results" / "backends" / "mnist-tpu-xla.json"


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory) -> Iterator[Path]:
    """Wheels for a CPU lock, and that lock (requirements.lock), resolved by uv from them offline."""
    folder = tmp_path_factory.mktemp("wheelhouse")
    try:
        yield build_wheelhouse(folder)
    except RuntimeError as exc:
        environment_missing(str(exc), "ENVKIT_REQUIRE_NOTEBOOK")
    # the wheels and uv's cache beside them (notebook_cpu.cpu_mode_env, torch unpacked): about 1 GB, gone with the
    # tests that use them rather than at the session's end
    for made in (folder, folder.with_name(f"{folder.name}-cache")):
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture(scope="session")
def executed(wheelhouse, tmp_path_factory, repo_root):
    """Every committed notebook, plus the --use-runtime variant of Colab's TPU notebook, run in CPU mode."""
    config = load_config(repo_root / "envkit.yaml")
    root = tmp_path_factory.mktemp("executed")
    runs = {}
    pairs = [(t.name, e, "lock") for t in config.targets.values() for e in t.notebooks]
    pairs.append(("colab-tpu", "tpu-mnist-single", "runtime"))
    for target, experiment, packages in pairs:
        path = repo_root / builder.notebook_path(Output(), target, experiment, packages)
        if packages == "runtime":  # not committed: rendered here
            path = root / path.name
            path.write_text(builder.render_notebook(config, experiment, target, packages).text)
        name = f"{target}/{path.stem}"  # as under notebooks/
        notebook, seconds = execute(path, wheelhouse, root / name / "work", root / name / "output")
        # one venv at a time: each holds torch (its files linked from uv's cache where the disk allows, copied
        # where not) and no test reads it once its notebook has run; the runtime variant makes none
        if packages == "lock":
            shutil.rmtree(root / name / "work" / "venv")
        runs[name] = {
            "notebook": notebook,
            "seconds": seconds,
            "results": sorted((root / name / "output" / "results").glob("*.json")),
            "page": root / name / "output" / "results" / "comparison.html",
        }
    return runs


def outputs(notebook: nbformat.NotebookNode, cell_id: str) -> str:
    cell = next(cell for cell in notebook.cells if cell.id == cell_id)
    return "".join(output.get("text", "") for output in cell.outputs if output.output_type == "stream")


def test_every_committed_notebook_runs_top_to_bottom(executed, wheelhouse, repo_root):
    packages = len(runtime_venv.lock_packages(wheelhouse / "requirements.lock"))
    committed = sorted(
        path.relative_to(repo_root / "notebooks").with_suffix("").as_posix()
        for path in (repo_root / "notebooks").glob("*/*.ipynb")
    )
    assert committed and set(committed) <= set(executed)
    for name in committed:
        notebook = executed[name]["notebook"]
        assert all(not any(o.output_type == "error" for o in cell.get("outputs", [])) for cell in notebook.cells)
        assert f"holds exactly the lock's {packages} packages" in outputs(notebook, "environment")
        assert "offline, from the wheelhouse" in outputs(notebook, "environment")
        run = outputs(notebook, "run")
        assert "%|" in run and "test accuracy" in run  # the recipe's live progress bar and its summary
        # the report, embedded: the table next to the published numbers, and the plot
        result = next(cell for cell in notebook.cells if cell.id == "result")
        shown = [output.data for output in result.outputs if output.output_type == "display_data"]
        assert any("# envkit comparison report" in data.get("text/markdown", "") for data in shown)
        assert any("image/png" in data for data in shown)
        # one results file per run of the experiment (E3: four)
        assert len(executed[name]["results"]) == len(notebook.metadata.envkit.runs)
        # and beside them the comparison page, drawn by the report the notebook embeds: its tables and figures
        assert "comparison.html" in outputs(notebook, "result")
        page = executed[name]["page"].read_text(encoding="utf-8")
        assert "<table" in page and "<svg" in page and "<script" not in page
    assert any(
        # E1's notebooks: the published numbers, apart from CPU mode's few steps on generated data
        "published (Colab 2020" in output.data.get("text/markdown", "")
        and "## mnist · dataset real · published, compared with no run here" in output.data["text/markdown"]
        for output in next(
            c for c in executed["colab-tpu/tpu-mnist-single"]["notebook"].cells if c.id == "result"
        ).outputs
        if output.output_type == "display_data"
    )


def test_results_carry_the_notebooks_provenance_and_validate(executed, wheelhouse, repo_root):
    schema = json.loads((repo_root / "envkit" / "data" / "results.schema.json").read_text())
    cpu_lock = runtime_venv.lock_packages(wheelhouse / "requirements.lock")
    assert executed, "no notebook was executed"
    for run in executed.values():
        assert run["results"], "a notebook wrote no results"
        for path in run["results"][1:]:
            jsonschema.validate(json.loads(path.read_text()), schema)
        document = json.loads(run["results"][0].read_text())
        jsonschema.validate(document, schema)
        block = document["notebook"]
        settings = {
            key: value for key, value in block.items() if key in ("platform", "accelerator", "target", "experiment")
        }
        meta = run["notebook"].metadata.envkit
        assert settings == {
            "platform": meta.platform,
            "accelerator": meta.accelerator,
            "target": meta.target,
            "experiment": meta.experiment,
        }
        assert block["cpu_mode"] is True and block["found"] == "no accelerator (CPU only)"
        # started through the run wrapper, as in an image: its run block names the experiment and the status
        assert (document["run"]["experiment"], document["run"]["exit_status"]) == (meta.experiment, 0)
        assert block["files"]["requirements.lock"] == meta.files["requirements.lock"]  # the lock it was rendered with
        assert block["runtime"]["python"] == ".".join(map(str, sys.version_info[:3]))
        assert_a_host_runs_facts(document)
        if block["packages"] == "lock":
            assert (
                block["lock_sha256"]
                == document["environment"]["lock_sha256"]
                == runtime_shared.sha256_of(wheelhouse / "requirements.lock")
            )
            assert block["installer"].startswith("uv ") and block["lock_differences"] is None
            # exactly the lock: every distribution the recipe's interpreter had
            assert document["environment"]["distributions"] == sorted(f"{n}=={v}" for n, v in cpu_lock.items())
        else:
            # the kernel's own packages: not the notebook's lock (this kernel's venv may name its own, envkit venv's)
            assert document["environment"]["lock_sha256"] != block["lock_sha256"] and block["installer"] is None


def assert_a_host_runs_facts(document: dict) -> None:
    """A notebook run records what a host run records (issue 40 §1): the device its Python processes used, as the run
    wrapper's start-up module saw it (the program runs without -E, which hid it), its metrics, and no warning: in
    CPU mode the lock the packages are compared with is the wheelhouse's, which the venv holds."""
    device = document["run"]["device"]
    assert (device["observed"], device["accelerator"], device["label"], device["errors"]) == (True, "cpu", "cpu", [])
    assert device["python_processes"] >= 1 and document["metrics"], document
    assert document["environment"]["device_type"] == "cpu" and document["run"]["warnings"] == []
    # and the conditions it was measured under (issue 40 §5): the CPUs it could use and the share it took
    conditions = document["run"]["conditions"]
    assert (
        conditions["cpus"] >= 1 and conditions["cpu_share"] > 0 and "OMP_NUM_THREADS" in conditions["thread_variables"]
    )


def test_report_reads_notebook_and_image_results_together(executed, tmp_path, capsys):
    for run in executed.values():
        shutil.copy(run["results"][0], tmp_path / f"{run['results'][0].stem}-{len(list(tmp_path.iterdir()))}.json")
    shutil.copy(IMAGE_RESULT, tmp_path / IMAGE_RESULT.name)
    assert main(["report", str(tmp_path)]) == 0
    report = capsys.readouterr().out
    assert "| tpu ×1 |" in report and "image envkit-tpu-vm:0123456789ab" in report  # the image's run
    for label in ("colab v5e-1 CPU mode, lock", "colab T4 CPU mode, lock", "kaggle TpuV5E8 CPU mode, lock"):
        assert f"| cpu ×1 ({label}) |" in report


def test_two_notebooks_lesson_lock_and_runtime_are_two_environments(executed, tmp_path, capsys):
    lock = executed["colab-tpu/tpu-mnist-single"]["results"][0]
    on_runtime = executed["colab-tpu/tpu-mnist-single-runtime"]["results"][0]
    shutil.copy(lock, tmp_path / "lock.json")
    shutil.copy(on_runtime, tmp_path / "runtime.json")
    assert main(["report", str(tmp_path), "--format", "json"]) == 0
    rows = {row["configuration"]: row["env"] for row in json.loads(capsys.readouterr().out)["rows"]}
    assert rows == {"cpu ×1 (colab v5e-1 CPU mode, lock)": "A", "cpu ×1 (colab v5e-1 CPU mode, runtime packages)": "B"}
    assert main(["report", str(tmp_path), "--strict"]) == 2
    assert "differ in torch and lock_sha256" in capsys.readouterr().err
    # the runtime run says how its packages differ from the lock, and envkit diff names them
    differences = json.loads(on_runtime.read_text())["notebook"]["lock_differences"]
    torch_here = next(entry for entry in differences if entry["package"] == "torch")
    assert torch_here["lock"] == "2.13.0+cpu" and torch_here["runtime"] != "2.13.0+cpu"
    assert main(["diff", str(tmp_path / "lock.json"), str(tmp_path / "runtime.json")]) == 1
    diff = capsys.readouterr().out
    assert f"torch: 2.13.0+cpu -> {torch_here['runtime']}" in diff and "python packages: " in diff


def test_a_command_experiments_notebook_runs_the_projects_command(wheelhouse, tmp_path, repo_root):
    """A user's project (tests/command_project.py): its files unpacked under project/, its own script run from there
    through the run wrapper in the lock's venv, its metrics in the results, and envkit's report of them."""
    project = command_project(tmp_path / "project")
    config = load_config(project / "envkit.yaml")
    path = tmp_path / "gpu-train.ipynb"
    path.write_text(builder.render_notebook(config, "gpu-train", "colab-t4").text)
    notebook, _ = execute(path, wheelhouse, tmp_path / "work", tmp_path / "output")
    assert all(not any(o.output_type == "error" for o in cell.get("outputs", [])) for cell in notebook.cells)
    assert "$ python train.py --epochs 2   (in project/)\ntrained, loss 0.25" in outputs(notebook, "run")
    seen = json.loads((tmp_path / "work" / "data" / "seen.json").read_text())
    assert (seen["cwd"], seen["prefix"]) == (str(tmp_path / "work" / "project"), str(tmp_path / "work" / "venv"))
    [result] = (tmp_path / "output" / "results").glob("*.json")
    document = json.loads(result.read_text())
    jsonschema.validate(document, json.loads((repo_root / "envkit" / "data" / "results.schema.json").read_text()))
    assert (document["run"]["experiment"], document["run"]["exit_status"]) == ("gpu-train", 0)
    assert document["metrics"] == {"loss": 0.25} and document["notebook"]["cpu_mode"] is True
    assert_a_host_runs_facts(document)
    assert document["environment"]["lock_sha256"] == runtime_shared.sha256_of(wheelhouse / "requirements.lock")
    # envkit's report of the run: its experiment's table, with the metric the program wrote
    result = next(cell for cell in notebook.cells if cell.id == "result")
    [table] = [
        o.data["text/markdown"] for o in result.outputs if o.output_type == "display_data" and "text/markdown" in o.data
    ]
    assert "# envkit comparison report" in table and "gpu-train" in table and "loss" in table, table

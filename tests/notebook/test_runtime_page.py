"""The notebooks' last cell writes the comparison as one HTML page (`envkit report --html`) from the report the
notebook embeds, the page's template included, and saves it beside the results, as the results are saved."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from paths import DATA

from envkit.notebook import runtime_shared

RESULT = DATA / "results" / "backends" / "mnist-tpu-xla.json"


def result_cell(repo_root: Path, notebook: str, work: Path, output: Path, monkeypatch, before: str = ""):
    """The committed notebook's settings, archive and runtime check, a result file placed where its run would write
    one (after ``before``), and its last cell, in a fresh ipykernel in CPU mode; the last cell, executed."""
    full = nbformat.read(repo_root / "notebooks" / notebook, as_version=4)
    cells = {cell.id: cell for cell in full.cells}
    placed = nbformat.v4.new_code_cell(
        f"{before}\nimport shutil\nfrom pathlib import Path\nPath('results').mkdir(exist_ok=True)\n"
        f"results = [Path(shutil.copy({str(RESULT)!r}, 'results'))]"
    )
    full.cells = [cells["settings"], cells["files"], cells["runtime-check"], placed, cells["result"]]
    monkeypatch.setenv(runtime_shared.CPU_MODE, str(work / "no-wheels"))  # the runtime check records, and passes
    monkeypatch.setenv("ENVKIT_NOTEBOOK_WORK", str(work))
    monkeypatch.setenv(runtime_shared.OUTPUT, str(output))
    NotebookClient(full, timeout=120, kernel_name="python3", allow_errors=True).execute()
    return full.cells[-1]


def run_result_cell(repo_root: Path, notebook: str, work: Path, output: Path, monkeypatch, before: str = "") -> str:
    """result_cell's, which ends without an error; its printed text."""
    last = result_cell(repo_root, notebook, work, output, monkeypatch, before)
    assert not any(o.output_type == "error" for o in last.outputs)
    return "".join(o.get("text", "") for o in last.outputs if o.output_type == "stream")


@pytest.mark.parametrize("notebook", ["kaggle-tpu/tpu-mnist.ipynb", "colab-t4/gpu-mnist.ipynb"])
def test_the_last_cell_saves_the_comparison_page_beside_the_results(repo_root, tmp_path, monkeypatch, notebook):
    text = run_result_cell(repo_root, notebook, tmp_path / "work", tmp_path / "output", monkeypatch)
    saved = tmp_path / "output" / "results"
    assert f"results saved in {saved}/: {RESULT.name}" in text
    assert f"MB, opens offline in a browser) saved in {saved}/: comparison.html" in text, text
    page = (saved / "comparison.html").read_text(encoding="utf-8")
    # the embedded report's page: its tables hold the run's figures, its figures are drawn, and it loads nothing
    assert page.startswith("<!DOCTYPE html>") and "<table" in page and "<svg" in page
    assert all(figure in page for figure in ("tpu ×1", "60.000", "99.10%")), page[:2000]
    assert not any(loads in page for loads in ("<script", "<link", " src="))
    # run again (Run all twice): the page is replaced, the results file is kept beside the first
    text = run_result_cell(repo_root, notebook, tmp_path / "work", tmp_path / "output", monkeypatch)
    assert sorted(path.name for path in saved.iterdir()) == sorted(
        ["comparison.html", RESULT.name, f"{RESULT.stem}-2.json"]
    )


def test_without_jinja2_the_table_and_results_stand_and_the_page_is_one_line(repo_root, tmp_path, monkeypatch):
    # A kernel whose Jinja2 cannot be imported (Colab and Kaggle have it): the page's template needs it.
    text = run_result_cell(
        repo_root, "kaggle-tpu/tpu-mnist.ipynb", tmp_path / "work", tmp_path / "output", monkeypatch,
        before="import sys\nsys.modules['jinja2'] = None",
    )  # fmt: skip
    assert f"results saved in {tmp_path / 'output' / 'results'}/: {RESULT.name}" in text
    assert "no page: it needs jinja2 in this kernel (" in text and text.rstrip().endswith("pip install jinja2"), text
    assert not (tmp_path / "output" / "results" / "comparison.html").exists()


def test_without_pyyaml_the_report_cell_is_one_line_naming_what_to_install(repo_root, tmp_path, monkeypatch):
    # envkit's report reads its report.yaml: a kernel without PyYAML stops in one line, not a 30-frame traceback
    last = result_cell(
        repo_root, "kaggle-tpu/tpu-mnist.ipynb", tmp_path / "work", tmp_path / "output", monkeypatch,
        before="import sys\nsys.modules['yaml'] = None",
    )  # fmt: skip
    assert [o.traceback for o in last.outputs if o.output_type == "error"] == [
        [
            "envkit: envkit's report needs PyYAML and jsonschema in this kernel (import of yaml halted; None in "
            "sys.modules): pip install pyyaml jsonschema"
        ]
    ]

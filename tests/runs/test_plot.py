"""The comparison plot: a real, readable PNG, written atomically."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import DATA, REPO_ROOT

from envkit.cli import main
from envkit.errors import EnvkitError
from envkit.runs.model import Report
from envkit.runs.plot import _draw_curves, require_matplotlib, write_plot
from envkit.runs.report import build_report
from envkit.runs.results import load_results

RESULTS = DATA / "results" / "mixed"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report():
    results, _ = load_results(RESULTS)
    return build_report(results, reference=True)


def test_plot_is_a_nontrivial_png(report, tmp_path):
    from matplotlib import image

    path = tmp_path / "plots" / "comparison.png"
    write_plot(report, path)
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 30_000  # three panels of labelled bars, not an empty canvas
    pixels = image.imread(path)
    height, width = pixels.shape[:2]
    assert height > 800 and width > 700  # one panel per section: cifar, mnist fake, mnist real
    assert pixels[..., :3].std() > 0.1  # bars and text on white, not a blank image
    assert list(tmp_path.glob("plots/.*")) == []  # no temp file left behind


def test_same_report_gives_same_bytes(report, tmp_path):
    write_plot(report, tmp_path / "a.png")
    write_plot(report, tmp_path / "b.png")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


def test_cli_writes_the_plot(tmp_path, capsys):
    path = tmp_path / "chart.png"
    assert main(["report", str(RESULTS), "--plot", str(path)]) == 0
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    assert f"envkit: wrote {path}" in capsys.readouterr().err


def test_failed_write_leaves_no_file(report, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    def broken_savefig(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    with pytest.raises(OSError):
        write_plot(report, tmp_path / "chart.png")
    assert list(tmp_path.iterdir()) == []


def test_nothing_to_plot_is_one_line(tmp_path):
    with pytest.raises(EnvkitError, match="^nothing to plot: no configuration recorded per-epoch timings"):
        write_plot(Report(sections=[], runs=0, skipped=0, baseline_rule="", reference=False), tmp_path / "x.png")
    assert list(tmp_path.iterdir()) == []


# Run envkit's CLI with a package hidden (HIDE, default matplotlib), as in an install without the `report` extra.
WITHOUT_MATPLOTLIB = """
import os
import sys

HIDDEN = os.environ.get("HIDE", "matplotlib")

class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Hide())
from envkit.cli import main
sys.exit(main(sys.argv[1:]))
"""
HINT = "uv tool install 'envkit-hw[report]', pipx install 'envkit-hw[report]' or pip install 'envkit-hw[report]'"
MISSING_LINE = f"envkit: error: plotting needs matplotlib, which is not installed: {HINT}"


def _without_matplotlib(*argv, cwd: Path, hide: str = "matplotlib") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_MATPLOTLIB, *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "HIDE": hide},
    )


def test_report_plot_without_matplotlib_is_one_line_naming_the_extra(tmp_path):
    done = _without_matplotlib("report", RESULTS, "--plot", tmp_path / "chart.png", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""  # refused before anything is printed
    assert done.stderr.splitlines() == [MISSING_LINE]
    assert list(tmp_path.iterdir()) == []
    # without --plot the report needs no matplotlib
    assert _without_matplotlib("report", RESULTS, cwd=tmp_path).returncode == 0


def test_the_page_without_matplotlib_has_its_tables_and_says_what_draws_its_figures(tmp_path):
    """Issue 40 §15: before, `report --html` exited 2 asking for the [report] extra, with a pip hint that a
    `uv tool install` environment (no pip) cannot follow: the page, envkit's main output, was not written."""
    page = tmp_path / "page.html"
    done = _without_matplotlib("report", RESULTS, "--html", page, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"envkit: the page has its tables without figures: matplotlib is not installed; {HINT}"
    )
    text = page.read_text()
    assert "<table" in text and "<svg" not in text
    assert f"This page has its tables without figures: matplotlib is not installed; {HINT} draws them." in (
        text.replace("&#39;", "'")
    )


def test_demo_without_matplotlib_refuses_before_running_anything(tmp_path):
    done = _without_matplotlib(
        "demo", "--no-docker", "--results-dir", tmp_path / "demo", "--config", REPO_ROOT / "envkit.yaml", cwd=tmp_path
    )
    assert (done.returncode, done.stdout, done.stderr.splitlines()) == (2, "", [MISSING_LINE])
    assert not (tmp_path / "demo").exists()


def test_matplotlib_that_does_not_import_says_why(tmp_path):
    done = _without_matplotlib("report", RESULTS, "--plot", tmp_path / "chart.png", cwd=tmp_path, hide="numpy")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        f"envkit: error: plotting needs matplotlib, which does not import here (No module named 'numpy'): {HINT}"
    ]


def test_require_matplotlib_passes_where_it_is_installed():
    require_matplotlib()
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "matplotlib", None)  # what `import matplotlib` meets when it is absent
        with pytest.raises(EnvkitError, match=r"^plotting needs matplotlib, which is not installed: "):
            require_matplotlib()


def test_no_title_runs_into_another_or_the_figures(tmp_path):
    """Bug B4: each panel repeated its long section title, and the titles overlapped each other and the figure's."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    from envkit.runs.plot import figure_of, plotted

    results, _ = load_results(RESULTS)
    long_title = "experiment train · cpu on a-long-host-name on lock 75a20fe120ea (" + "a reason " * 12 + ")"
    report = build_report(results, reference=True)
    for section in report.sections:
        section.differs = [long_title]
    figure = figure_of(report, plotted(report)[0])
    try:
        figure.canvas.draw()
        renderer = figure.canvas.get_renderer()
        titles = [figure._suptitle] + [sub._suptitle for sub in figure.subfigs]
        titles += [axes.title for axes in figure.get_axes()]
        boxes = [text.get_window_extent(renderer) for text in titles if text is not None and text.get_text()]
        assert len(boxes) == 1 + 2 * len(plotted(report)[0])  # the figure's, each section's, each panel's
        whole = figure.bbox
        for index, box in enumerate(boxes):
            assert whole.x0 <= box.x0 and box.x1 <= whole.x1, "a title runs off the figure"
            assert not any(box.overlaps(other) for other in boxes[index + 1 :]), "two titles overlap"
    finally:
        pyplot.close(figure)


def test_identical_curves_of_two_targets_are_told_apart_and_named(tmp_path):
    """Issue 40 §10: before, two targets' identical curves drew as one line (only the last colour showed)."""
    from run_records import record

    from envkit.runs.model import identical, identical_groups

    results = tmp_path / "results"
    series = {"loss": {"step": [0, 1, 2], "value": [2.0, 1.0, 0.5]}}
    for name, target in (("a", "cpu"), ("b", "cpu-1t"), ("c", "cpu-2t")):
        other = {"loss": {"step": [0, 1, 2], "value": [2.0, 1.5, 1.0]}} if target == "cpu-2t" else series
        record(results, name, device="cpu", image=None, wall=1.0, target=target, series=other)
    (section,) = build_report(load_results(results)[0]).sections
    curves = [row.curves["loss"] for row in section.rows]
    assert identical(curves) == [None, 0, None]
    assert identical_groups([row.label for row in section.rows], identical(curves)) == ["cpu and cpu-1t"]
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots()
    _draw_curves(axes, "loss", section.rows)
    assert "(identical: cpu and cpu-1t)" in axes.get_title()
    lines = [line for line in axes.get_lines() if len(line.get_xdata()) > 1]
    assert len({line.get_linestyle() for line in lines}) == 3  # one line style each: the two identical ones apart
    pyplot.close(figure)


def test_the_png_plot_draws_curves_with_the_pages_function_and_bound():
    """Issue 41 §1: before, plot.py and page_figures.py each drew curves their own way, under their own limits."""
    from envkit.runs import page_figures, plot

    assert plot.MAX_ROWS == page_figures.MAX_TARGETS
    assert plot.draw_series is page_figures.draw_series

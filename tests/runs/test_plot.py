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
from envkit.runs.figures import require_matplotlib
from envkit.runs.model import Report
from envkit.runs.plot import write_plot
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


def test_no_title_runs_off_the_picture(tmp_path):
    """Bug B4: long section titles ran into each other and the figure's; each title is now a line of its own,
    wrapped to the picture's width."""
    from envkit.runs.plot import DPI, TITLE_WIDTH, _title

    long_title = "experiment train · cpu on a-long-host-name on lock 75a20fe120ea (" + "a reason " * 12 + ")"
    import io

    import numpy
    from PIL import Image

    short, long = (Image.open(io.BytesIO(_title(text, 12))).convert("RGB") for text in ("experiment train", long_title))
    assert long.width == short.width == round(TITLE_WIDTH * DPI)
    assert long.height > short.height  # wrapped onto a second line
    assert numpy.asarray(long)[:, -5:].min() == 255  # nothing drawn at the right edge: no text runs off


def test_the_png_stacks_the_pages_own_figures(tmp_path, monkeypatch):
    """Issue 41 §1: before, plot.py and page_figures.py each drew their own charts (the PNG's bars per
    configuration, the page's speed-ups, first epochs and goals) under their own limits; now the PNG holds the
    page's figures, in its order, drawn by envkit.runs.figures."""
    import re

    from envkit.runs import plot

    saved = []

    def recording(figure, dpi):
        if figure.caption:  # a figure, not a title line above one
            saved.append(figure.title)
        return png_bytes(figure, dpi)

    from envkit.runs.figures import png_bytes

    monkeypatch.setattr(plot, "png_bytes", recording)
    page = tmp_path / "page.html"
    assert main(["report", str(RESULTS), "--reference", "--plot", str(tmp_path / "p.png"), "--html", str(page)]) == 0
    assert saved == re.findall(r'<figure role="img" aria-label="([^"]*)"', page.read_text())
    assert saved[:3] == ["Measured", "Speed-up", "First epoch and steady state"]


def test_identical_curves_of_two_targets_are_told_apart_and_named(tmp_path):
    """Issue 40 §10: before, two targets' identical curves drew as one line (only the last colour showed)."""
    from run_records import record

    from envkit.runs import figures
    from envkit.runs.model import identical, identical_groups
    from envkit.runs.page_adapter import comparison_of

    results = tmp_path / "results"
    series = {"loss": {"step": [0, 1, 2], "value": [2.0, 1.0, 0.5]}}
    for name, target in (("a", "cpu"), ("b", "cpu-1t"), ("c", "cpu-2t")):
        other = {"loss": {"step": [0, 1, 2], "value": [2.0, 1.5, 1.0]}} if target == "cpu-2t" else series
        record(results, name, device="cpu", image=None, wall=1.0, target=target, series=other)
    report = build_report(load_results(results)[0])
    (section,) = report.sections
    curves = [row.curves["loss"] for row in section.rows]
    assert identical(curves) == [None, 0, None]
    assert identical_groups([row.label for row in section.rows], identical(curves)) == ["cpu and cpu-1t"]
    figure = figures.curve_figure(comparison_of(section, report, drawn=True), "loss")
    assert "Identical curves (drawn in other line styles and markers): cpu and cpu-1t." in figure.caption
    lines = [line for line in figure.drawn.axes[0].get_lines() if len(line.get_xdata()) > 1]
    assert len({line.get_linestyle() for line in lines}) == 3  # one line style each: the two identical ones apart
    figures.close([figure])


def test_the_tiles_are_stacked_left_aligned_on_white_row_by_row():
    """The PNG is written a row at a time, never held whole (5,000 runs' figures: 1607 × 11350 pixels, whose
    RGBA float copies peaked at 1137 MB against the report's 300 MB figure; now 274 MB)."""
    import io

    from PIL import Image

    from envkit.runs.plot import _write_stacked

    def tile(size, colour):
        buffer = io.BytesIO()
        Image.new("RGBA", size, colour).save(buffer, format="png")
        return buffer.getvalue()

    stream = io.BytesIO()
    _write_stacked(stream, [tile((3, 2), (255, 0, 0, 255)), tile((5, 1), (0, 0, 255, 255))])
    picture = Image.open(io.BytesIO(stream.getvalue()))
    assert (picture.size, picture.mode, round(picture.info["dpi"][0])) == ((5, 3), "RGB", 110)
    assert [picture.getpixel((x, 0)) for x in range(5)] == [(255, 0, 0)] * 3 + [(255, 255, 255)] * 2
    assert [picture.getpixel((x, 2)) for x in range(5)] == [(0, 0, 255)] * 5


def test_a_title_is_drawn_as_written_never_as_a_formula():
    """A comparison's title holds the program's arguments and names: "loss$\\x$" is text, not mathtext (before, the
    PNG's title lines were drawn with matplotlib's defaults, and this one raised ValueError)."""
    from envkit.runs.plot import _title

    assert _title("experiment train · arguments `--name loss$\\x$`", 12).startswith(b"\x89PNG")

"""The comparison plot: a real, readable PNG, written atomically."""

from __future__ import annotations

from pathlib import Path

import pytest

from envkit.cli import main
from envkit.errors import EnvkitError
from envkit.plot import write_plot
from envkit.report import Report, build_report
from envkit.results import load_results

RESULTS = Path(__file__).parent / "data" / "results" / "mixed"
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

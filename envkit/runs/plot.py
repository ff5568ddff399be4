"""`envkit report --plot FILE.png`: the page's figures (envkit.runs.figures) in one PNG, a comparison after another.

The figures are the page's own objects, drawn once from the same comparisons (envkit.runs.page_adapter) and saved
as PNG instead of SVG: what each draws, its bounds, labels and order are envkit.runs.figures' alone. Each figure
stands under its comparison's title and its own; the PNG is bounded as the page is, and what it leaves out is
said, a line each.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.runs.figures import MAX_SECTIONS, Figure, close, comparison_figures, png_pixels, require_matplotlib
from envkit.runs.model import Report
from envkit.runs.page_adapter import comparison_of
from envkit.support.atomic import atomic_stream

DPI = 110
TITLE_WIDTH = 9.0  # inches: a title line wraps at this width
NAMED = 5  # titles named in a line of what was left out


def _named(titles: list[str]) -> str:
    shown = ", ".join(titles[:NAMED])
    return shown + (f" and {len(titles) - NAMED} more" if len(titles) > NAMED else "")


def _title(text: str, points: float):
    """A title line as pixels, wrapped to TITLE_WIDTH: a long title (an experiment's arguments, a lock) must not
    run off the picture (bug B4)."""
    from matplotlib import pyplot

    lines = textwrap.wrap(text, max(12, int(TITLE_WIDTH * 72 / (0.55 * points)))) or [text]
    figure = pyplot.figure(figsize=(TITLE_WIDTH, (len(lines) * 1.5 + 0.5) * points / 72))
    figure.text(0.01, 0.5, "\n".join(lines), fontsize=points, va="center", ha="left")
    try:
        return png_pixels(Figure(text, figure, "", tight=False), DPI)
    finally:
        pyplot.close(figure)


def _tiles(report: Report) -> tuple[list, list[str]]:
    """The PNG's parts top to bottom (pixels): the report's title, then per comparison with figures its title and
    each figure under its own; and a line for each thing the bounds left out."""
    tiles, left_out = [], []
    for section in report.sections[:MAX_SECTIONS]:
        comparison = comparison_of(section, report, drawn=True)
        figures, curves_left_out = comparison_figures(comparison)
        if not figures:
            continue
        tiles.append(_title(comparison.title, 12))
        try:
            for figure in figures:
                tiles += [_title(figure.title, 10), png_pixels(figure, DPI)]
        finally:
            close(figures)
        left_out += [
            f"{comparison.title}: {what}" for what in [f.left_out for f in figures] + [curves_left_out] if what
        ]
    if len(report.sections) > MAX_SECTIONS:
        titles = [section.title for section in report.sections[MAX_SECTIONS:]]
        left_out.append(f"{len(titles)} sections after the first {MAX_SECTIONS}: {_named(titles)}")
    if tiles:
        tiles.insert(0, _title(_heading(report), 14))
    return tiles, left_out


def _heading(report: Report) -> str:
    published = any(row.source != "ours" for section in report.sections for row in section.rows)
    return "envkit comparison (mean ± std" + ("; hatched bars: published numbers)" if published else ")")


def _stacked(tiles: list):
    """The tiles one under another on white, left-aligned, as one RGBA image."""
    import numpy

    width = max(tile.shape[1] for tile in tiles)
    padded = []
    for tile in tiles:
        rgba = tile if tile.shape[2] == 4 else numpy.dstack([tile, numpy.ones(tile.shape[:2], tile.dtype)])
        padded.append(numpy.pad(rgba, ((0, 0), (0, width - tile.shape[1]), (0, 0)), constant_values=1.0))
    return numpy.vstack(padded)


def write_plot(report: Report, path: Path) -> list[str]:
    """Write the PNG atomically: the page's figures of each comparison, under its title; return what the bounds
    left out, a line each."""
    require_matplotlib()
    from matplotlib import image

    tiles, left_out = _tiles(report)
    if not tiles:
        raise EnvkitError(
            "nothing to plot: no configuration recorded per-epoch timings and no command's run succeeded "
            "(runs stopped before an epoch ended, or failed?)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_stream(path) as stream:
        # No "Software" text chunk: the same report gives the same bytes.
        image.imsave(stream, _stacked(tiles), format="png", dpi=DPI, metadata={"Software": None})
    return left_out

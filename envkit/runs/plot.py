"""`envkit report --plot FILE.png`: the page's figures (envkit.runs.figures) in one PNG, a comparison after another.

The figures are the page's own objects, drawn once from the same comparisons (envkit.runs.page_adapter) and saved
as PNG instead of SVG: what each draws, its bounds, labels and order are envkit.runs.figures' alone. Each figure
stands under its comparison's title and its own; the PNG is bounded as the page is, and what it leaves out is
said, a line each.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.runs.figures import (
    MAX_SECTIONS,
    close,
    comparison_figures,
    named,
    png_bytes,
    require_matplotlib,
    title_figure,
)
from envkit.runs.model import OURS, Report
from envkit.runs.page_adapter import comparison_of
from envkit.support.atomic import atomic_stream

DPI = 110
TITLE_WIDTH = 9.0  # inches: a title line wraps at this width


def _title(text: str, points: float) -> bytes:
    """A title line as PNG, TITLE_WIDTH wide."""
    figure = title_figure(text, points, TITLE_WIDTH)
    try:
        return png_bytes(figure, DPI)
    finally:
        close([figure])


def _tiles(report: Report) -> tuple[list[bytes], list[str]]:
    """The PNG's parts top to bottom, each a PNG of its own: the report's title, then per comparison with figures
    its title and each figure under its own; and a line for each thing the bounds left out."""
    tiles, left_out = [], []
    for section in report.sections[:MAX_SECTIONS]:
        comparison = comparison_of(section, report, drawn=True)
        figures, curves_left_out = comparison_figures(comparison)
        if not figures:
            continue
        tiles.append(_title(comparison.title, 12))
        try:
            for figure in figures:
                tiles += [_title(figure.title, 10), png_bytes(figure, DPI)]
        finally:
            close(figures)
        left_out += [
            f"{comparison.title}: {what}" for what in [f.left_out for f in figures] + [curves_left_out] if what
        ]
    if len(report.sections) > MAX_SECTIONS:
        titles = [section.title for section in report.sections[MAX_SECTIONS:]]
        left_out.append(f"{len(titles)} sections after the first {MAX_SECTIONS}: {named(titles)}")
    if tiles:
        tiles.insert(0, _title(_heading(report), 14))
    return tiles, left_out


def _heading(report: Report) -> str:
    published = any(row.source != OURS for section in report.sections for row in section.rows)
    return "envkit comparison (mean ± std" + ("; hatched bars: published numbers)" if published else ")")


def _chunk(stream, kind: bytes, data: bytes) -> None:
    stream.write(struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data)))


def _write_stacked(stream, tiles: list[bytes]) -> None:
    """The tiles one under another on white, left-aligned, written as one RGB PNG row by row: a tile is decoded
    (pillow: matplotlib's own dependency) only as it is written, so the picture is never held whole (5,000 runs'
    figures are 1607 × 11350 pixels). No text chunk (no software, no date): the same tiles give the same bytes."""
    from PIL import Image

    sizes = []
    for tile in tiles:
        with Image.open(io.BytesIO(tile)) as opened:
            sizes.append(opened.size)
    width = max(tile_width for tile_width, _ in sizes)
    stream.write(b"\x89PNG\r\n\x1a\n")
    _chunk(stream, b"IHDR", struct.pack(">IIBBBBB", width, sum(height for _, height in sizes), 8, 2, 0, 0, 0))
    per_metre = round(DPI / 0.0254)
    _chunk(stream, b"pHYs", struct.pack(">IIB", per_metre, per_metre, 1))
    compressor = zlib.compressobj(6)
    for tile, (tile_width, height) in zip(tiles, sizes):
        with Image.open(io.BytesIO(tile)) as opened:
            pixels = opened.convert("RGB").tobytes()
        margin = b"\xff" * 3 * (width - tile_width)
        for row in range(height):
            # Each row: filter type 0 (none), the tile's pixels, white to the picture's width.
            if packed := compressor.compress(
                b"\x00" + pixels[row * 3 * tile_width : (row + 1) * 3 * tile_width] + margin
            ):
                _chunk(stream, b"IDAT", packed)
    _chunk(stream, b"IDAT", compressor.flush())
    _chunk(stream, b"IEND", b"")


def write_plot(report: Report, path: Path) -> list[str]:
    """Write the PNG atomically: the page's figures of each comparison, under its title; return what the bounds
    left out, a line each."""
    require_matplotlib()
    tiles, left_out = _tiles(report)
    if not tiles:
        raise EnvkitError(
            "nothing to plot: no configuration recorded per-epoch timings and no command's run succeeded "
            "(runs stopped before an epoch ended, or failed?)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_stream(path) as stream:
        _write_stacked(stream, tiles)
    return left_out

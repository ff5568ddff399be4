"""The comparison as a picture: a row of bar charts per report section, error bars = std.

What each section draws is data (envkit/data/report.yaml: panels, tick): one panel for
E1 and E2 (seconds per epoch), two for E3 (test accuracy beside seconds per epoch), and for
a command's experiment its wall time per place and a panel per metric the program reported.
matplotlib is imported inside ``write_plot`` (and forced onto the headless Agg
backend) so that the rest of envkit never pays for it or needs a display; it is
the optional extra ``report``, and ``require_matplotlib`` says so in one line.
"""

from __future__ import annotations

import math
from pathlib import Path

from envkit import DISTRIBUTION
from envkit.errors import EnvkitError
from envkit.runs.report import METRICS, OURS, Report, Row, Section, column_of
from envkit.support.atomic import atomic_stream

INSTALL_HINT = f"pip install '{DISTRIBUTION}[report]'"
HATCHES = ("", "//", "..", "xx")
MIN_SLOTS = 4


def require_matplotlib() -> None:
    """One line naming the extra to install (EnvkitError, exit 2) when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        if exc.name == "matplotlib":
            raise EnvkitError(f"plotting needs matplotlib, which is not installed: {INSTALL_HINT}") from None
        raise EnvkitError(f"plotting needs matplotlib, which does not import here ({exc}): {INSTALL_HINT}") from None


def panels(section: Section) -> list[list[tuple[str, str]]]:
    """Per panel of ``section`` (report.yaml panels; ``metrics``: one per metric its rows reported), the
    (column, legend name) bars drawn side by side per row."""
    drawn = []
    for panel in section.facts["panels"]:
        drawn += [[f"{METRICS}.{name}"] for name in section.metric_names] if panel == METRICS else [panel]
    return [[(key, column_of(key).short_name) for key in panel] for panel in drawn]


def _tick_label(row: Row) -> str:
    # A command's place names its device, then the image, host or notebook: a line each, as bars sit close.
    label = row.place.replace(" on ", "\n", 1) if row.place else row.label
    label = label if row.run is None else f"{row.run}\n{label}"
    facts = row.facts["tick"]
    if facts:
        label += "\n" + facts.format(**row.configuration, **row.settings)
    if row.source != OURS:
        label += f"\n(published: {row.source_short})"
    return label


def _draw_panel(axes, section: Section, drawn_bars: list[tuple[str, str]], rows: list[Row], sources: list[str]) -> None:
    width = 0.8 / len(drawn_bars)
    positions = range(len(rows))
    for index, (key, name) in enumerate(drawn_bars):
        offsets = [p + (index - (len(drawn_bars) - 1) / 2) * width for p in positions]
        measured = [column_of(key).measure(row) or (0.0, 0.0) for row in rows]
        means = [mean for mean, _ in measured]
        drawn = axes.bar(
            offsets,
            means,
            width,
            yerr=[spread for _, spread in measured],
            capsize=3,
            color=f"C{index}",
            label=name,
            edgecolor="black",
            linewidth=0.5,
        )
        for patch, row in zip(drawn, rows):
            # Published rows share the colours but are hatched, so they cannot pass for ours.
            patch.set_hatch(HATCHES[sources.index(row.source) % len(HATCHES)])
        axes.bar_label(drawn, labels=[f"{m:.3g}" if m else "" for m in means], padding=2, fontsize=7)
    # A few configurations must not stretch into slabs: keep room for at least MIN_SLOTS bars.
    spare = (max(len(rows), MIN_SLOTS) - len(rows)) / 2
    axes.set_xlim(-0.5 - spare, len(rows) - 0.5 + spare)
    axes.set_xticks(
        list(positions),
        [_tick_label(row) for row in rows],
        fontsize=8,
        rotation=30 if len(rows) > 6 else 0,
        ha="right" if len(rows) > 6 else "center",
    )
    axes.set_ylabel(column_of(drawn_bars[0][0]).axis)
    axes.set_title(section.title)
    axes.margins(y=0.15)
    axes.legend(fontsize=7, loc="upper left")


def _panel_width(panel_count: int, rows: int) -> float:
    # One panel keeps the width it always had; panels side by side share theirs.
    return max(7.0, 1.1 * rows + 2) if panel_count == 1 else panel_count * max(5.0, 1.1 * rows + 1.5)


def write_plot(report: Report, path: Path) -> None:
    """Write the PNG atomically: one row of panels per section, its bars per configuration (or run)."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    drawable = []
    for section in report.sections:
        keys = {key for panel in panels(section) for key, _ in panel}
        rows = [row for row in section.rows if any(column_of(key).measure(row) is not None for key in keys)]
        if rows:
            drawable.append((section, rows))
    if not drawable:
        raise EnvkitError(
            "nothing to plot: no configuration recorded per-epoch timings and no command's run succeeded "
            "(runs stopped before an epoch ended, or failed?)"
        )
    columns = math.lcm(*(len(panels(section)) for section, _ in drawable))
    figure = pyplot.figure(
        figsize=(
            # Published rows bring three-line, slanted tick labels: give each panel room for them.
            max(_panel_width(len(panels(section)), len(rows)) for section, rows in drawable),
            (5.2 if report.reference else 4.2) * len(drawable),
        )
    )
    grid = figure.add_gridspec(len(drawable), columns)
    for line, (section, rows) in enumerate(drawable):
        sources = list(dict.fromkeys(row.source for row in rows))
        span = columns // len(panels(section))
        for index, drawn_bars in enumerate(panels(section)):
            _draw_panel(
                figure.add_subplot(grid[line, index * span : (index + 1) * span]), section, drawn_bars, rows, sources
            )
    figure.suptitle(
        "envkit comparison (mean ± std; hatched bars: published numbers)"
        if report.reference
        else "envkit comparison (mean ± std)"
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_stream(path) as stream:
            # No "Software" text chunk: the same report gives the same bytes.
            figure.savefig(stream, format="png", dpi=110, metadata={"Software": None})
    finally:
        pyplot.close(figure)

"""The comparison as a picture: a row of bar charts per report section, error bars = std.

What each section draws is data (envkit/data/report.yaml: panels, tick): one panel for
E1 and E2 (seconds per epoch), two for E3 (test accuracy beside seconds per epoch), and for
a command's comparison its wall time per target, a panel per metric the program reported and
a curve panel per series it wrote. The picture is bounded (``plotted``): what it leaves out is
said, a line each.
matplotlib is imported inside ``write_plot`` (and forced onto the headless Agg
backend) so that the rest of envkit never pays for it or needs a display; it is
the optional extra ``report``, and ``require_matplotlib`` says so in one line. The HTML page is written without
it, its tables whole and its figures left out with one line saying what to install (``matplotlib_problem``).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

from envkit import DISTRIBUTION
from envkit.errors import EnvkitError
from envkit.runs.columns import METRICS, column_of
from envkit.runs.model import OURS, Report, Row, Section, drawn_value, identical_groups
from envkit.runs.page_figures import MAX_TARGETS, draw_series
from envkit.support.atomic import atomic_stream

# For each installer: a `uv tool install` environment has no pip, and pipx's is its own.
INSTALL_HINT = (
    f"uv tool install '{DISTRIBUTION}[report]', pipx install '{DISTRIBUTION}[report]' "
    f"or pip install '{DISTRIBUTION}[report]'"
)
HATCHES = ("", "//", "..", "xx")
MIN_SLOTS = 4
# The plot's bounds (a results directory may hold thousands of runs): sections, panels per section, rows per panel,
# the figure's width in inches (at 110 dpi), and how many left-out names a line gives.
MAX_SECTIONS = 8
MAX_PANELS = 6
MAX_ROWS = MAX_TARGETS  # the page's bound: one limit for the PNG and the SVG figures
MAX_WIDTH = 24.0
NAMED = 5


def matplotlib_problem() -> str | None:
    """Why matplotlib cannot draw here ("is not installed", "does not import here (...)"), or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return "is not installed" if exc.name == "matplotlib" else f"does not import here ({exc})"
    return None


def require_matplotlib() -> None:
    """One line naming the extra to install (EnvkitError, exit 2) when matplotlib cannot be imported."""
    problem = matplotlib_problem()
    if problem:
        raise EnvkitError(f"plotting needs matplotlib, which {problem}: {INSTALL_HINT}")


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


def _draw_panel(axes, drawn_bars: list[tuple[str, str]], rows: list[Row], sources: list[str]) -> None:
    width = 0.8 / len(drawn_bars)
    positions = range(len(rows))
    for index, (key, name) in enumerate(drawn_bars):
        offsets = [p + (index - (len(drawn_bars) - 1) / 2) * width for p in positions]
        measured = [column_of(key).measure(row) or (0.0, 0.0) for row in rows]
        means = [drawn_value(mean) for mean, _ in measured]
        drawn = axes.bar(
            offsets,
            means,
            width,
            yerr=[drawn_value(spread) for _, spread in measured],
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
    axes.set_title(_wrapped(" + ".join(name for _, name in drawn_bars), axes), fontsize=10)
    axes.margins(y=0.15)
    axes.legend(fontsize=7, loc="upper left")


def _draw_curves(axes, name: str, rows: list[Row]) -> None:
    """One series as a curve per row, drawn as the page draws it (page_figures.draw_series: identical curves apart,
    and the title names them)."""
    drawn = [row for row in rows if name in row.curves]
    repeats, _ = draw_series(axes, [(_tick_label(row), row.curves[name]) for row in drawn])
    unit = drawn[0].curves[name].unit if drawn else "step"
    axes.set_xlabel(f"{unit} (first {unit} marked)" if unit == "step" else unit)
    axes.set_ylabel(name)
    labels = [row.label if row.run is None else row.run for row in drawn]
    same = "; ".join(identical_groups(labels, repeats))
    axes.set_title(_wrapped(f"{name} per {unit}" + (f" (identical: {same})" if same else ""), axes), fontsize=10)
    axes.legend(fontsize=7, loc="best")


def _panel_width(panel_count: int, rows: int) -> float:
    # One panel keeps the width it always had; panels side by side share theirs.
    return max(7.0, 1.1 * rows + 2) if panel_count == 1 else panel_count * max(5.0, 1.1 * rows + 1.5)


def _named(titles: list[str]) -> str:
    shown = ", ".join(titles[:NAMED])
    return shown + (f" and {len(titles) - NAMED} more" if len(titles) > NAMED else "")


def plotted(report: Report) -> tuple[list[tuple[Section, list[Row], list]], list[str]]:
    """What the plot draws, bounded whatever the results directory holds: at most MAX_SECTIONS sections, each
    at most MAX_PANELS panels (its bar panels, then a curve per series) of at most MAX_ROWS rows; and one line
    for each thing it leaves out."""
    drawable, left_out = [], []
    for section in report.sections:
        keys = {key for panel in panels(section) for key, _ in panel}
        rows = [
            row for row in section.rows if row.curves or any(column_of(key).measure(row) is not None for key in keys)
        ]
        if not rows:
            continue
        drawn = [("bars", panel) for panel in panels(section)] + [("curve", name) for name in section.series_names]
        if len(drawn) > MAX_PANELS:
            names = [" + ".join(name for _, name in what) if kind == "bars" else what for kind, what in drawn]
            left_out.append(f"{section.title}: the panels {_named(names[MAX_PANELS:])} (at most {MAX_PANELS})")
        if len(rows) > MAX_ROWS:
            left_out.append(f"{section.title}: {len(rows) - MAX_ROWS} rows after the first {MAX_ROWS}")
        drawable.append((section, rows[:MAX_ROWS], drawn[:MAX_PANELS]))
    if len(drawable) > MAX_SECTIONS:
        titles = [section.title for section, _, _ in drawable[MAX_SECTIONS:]]
        left_out.append(f"{len(titles)} sections after the first {MAX_SECTIONS}: {_named(titles)}")
    return drawable[:MAX_SECTIONS], left_out


def _wrapped(text: str, where, points: float = 10.0) -> str:
    """``text`` in lines that fit the width of ``where`` (axes or a subfigure) at ``points``: a long title (an
    experiment's arguments, a lock) must not run into its neighbour's (bug B4)."""
    figure = where.get_figure(root=True) if hasattr(where, "get_figure") else where.figure
    inches = figure.get_figwidth() * (where.get_position().width if hasattr(where, "get_position") else 1.0)
    # An average character is about 0.55 of the font's size wide.
    return "\n".join(textwrap.wrap(text, max(12, int(inches * 72 / (0.55 * points))))) or text


def figure_of(report: Report, drawable: list) -> object:
    """The figure: one subfigure per section, titled once by it, its panels titled by what they show, laid out
    by matplotlib's constrained layout so that no title runs into another or into the figure's."""
    from matplotlib import pyplot

    columns = math.lcm(*(len(drawn) for _, _, drawn in drawable))
    figure = pyplot.figure(
        figsize=(
            # Published rows bring three-line, slanted tick labels: give each panel room for them.
            min(MAX_WIDTH, max(_panel_width(len(drawn), len(rows)) for _, rows, drawn in drawable)),
            (5.2 if report.reference else 4.2) * len(drawable),
        ),
        layout="constrained",
    )
    figure.suptitle(
        "envkit comparison (mean ± std; hatched bars: published numbers)"
        if report.reference
        else "envkit comparison (mean ± std)"
    )
    lines = figure.subfigures(len(drawable), 1, squeeze=False)[:, 0]
    for line, (section, rows, drawn) in zip(lines, drawable):
        line.suptitle(_wrapped(section.title, line, 11), fontsize=11)
        grid = line.add_gridspec(1, columns)
        sources = list(dict.fromkeys(row.source for row in rows))
        span = columns // len(drawn)
        for index, (kind, what) in enumerate(drawn):
            axes = line.add_subplot(grid[0, index * span : (index + 1) * span])
            if kind == "bars":
                _draw_panel(axes, what, rows, sources)
            else:
                _draw_curves(axes, what, rows)
    return figure


def write_plot(report: Report, path: Path) -> list[str]:
    """Write the PNG atomically: one row of panels per section, its bars per configuration (or run), its
    series as curves; return what the bounds left out (plotted), a line each."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False  # a name is drawn as written: "loss$\\x$" is no formula
    from matplotlib import pyplot

    drawable, left_out = plotted(report)
    if not drawable:
        raise EnvkitError(
            "nothing to plot: no configuration recorded per-epoch timings and no command's run succeeded "
            "(runs stopped before an epoch ended, or failed?)"
        )
    figure = figure_of(report, drawable)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_stream(path) as stream:
            # No "Software" text chunk: the same report gives the same bytes.
            figure.savefig(stream, format="png", dpi=110, metadata={"Software": None})
    finally:
        pyplot.close(figure)
    return left_out

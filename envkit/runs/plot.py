"""The comparison as a picture: one bar chart per report section, error bars = std.

Which statistics each recipe draws is data (envkit/data/report.yaml: bars, tick).
matplotlib is imported inside ``write_plot`` (and forced onto the headless Agg
backend) so that the rest of envkit never pays for it or needs a display; it is
the optional extra ``report``, and ``require_matplotlib`` says so in one line.
"""

from __future__ import annotations

from pathlib import Path

from envkit.support.atomic import atomic_stream
from envkit.errors import EnvkitError
from envkit.runs.report import COLUMNS, OURS, Report, Row, Section, recipe_facts

INSTALL_HINT = "pip install 'envkit[report]'"
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


def bars(recipe: str) -> list[tuple[str, str]]:
    """(statistic, legend name) drawn side by side for each configuration of ``recipe``."""
    return [(key, COLUMNS[key].short_name) for key in recipe_facts(recipe)["bars"]]


def _tick_label(row: Row) -> str:
    label = row.label
    facts = recipe_facts(row.recipe)["tick"]
    if facts:
        label += "\n" + facts.format(**row.configuration)
    if row.source != OURS:
        label += f"\n(published: {row.source_short})"
    return label


def _draw_section(axes, section: Section, rows: list[Row], sources: list[str]) -> None:
    drawn_bars = bars(section.recipe)
    width = 0.8 / len(drawn_bars)
    positions = range(len(rows))
    for index, (statistic, name) in enumerate(drawn_bars):
        offsets = [p + (index - (len(drawn_bars) - 1) / 2) * width for p in positions]
        means = [row.stats[statistic].mean if statistic in row.stats else 0.0 for row in rows]
        errors = [row.stats[statistic].std if statistic in row.stats else 0.0 for row in rows]
        drawn = axes.bar(offsets, means, width, yerr=errors, capsize=3, color=f"C{index}",
                         label=name, edgecolor="black", linewidth=0.5)
        for patch, row in zip(drawn, rows):
            # Published rows share the colours but are hatched, so they cannot pass for ours.
            patch.set_hatch(HATCHES[sources.index(row.source) % len(HATCHES)])
        axes.bar_label(drawn, labels=[f"{m:.3g}" if m else "" for m in means], padding=2, fontsize=7)
    # A few configurations must not stretch into slabs: keep room for at least MIN_SLOTS bars.
    spare = (max(len(rows), MIN_SLOTS) - len(rows)) / 2
    axes.set_xlim(-0.5 - spare, len(rows) - 0.5 + spare)
    axes.set_xticks(list(positions), [_tick_label(row) for row in rows], fontsize=8,
                    rotation=30 if len(rows) > 6 else 0, ha="right" if len(rows) > 6 else "center")
    axes.set_ylabel("seconds per epoch (s)")
    axes.set_title(f"{section.recipe} · dataset {section.dataset}")
    axes.margins(y=0.15)
    axes.legend(fontsize=7, loc="upper left")


def write_plot(report: Report, path: Path) -> None:
    """Write the PNG atomically; bars are the steady-state epoch timings of each row."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    drawable = [(section, [row for row in section.rows if any(s in row.stats for s, _ in bars(section.recipe))])
                for section in report.sections]
    drawable = [(section, rows) for section, rows in drawable if rows]
    if not drawable:
        raise EnvkitError("nothing to plot: no configuration recorded per-epoch timings (runs stopped before an epoch ended?)")
    figure, axes_list = pyplot.subplots(
        # Published rows bring three-line, slanted tick labels: give each panel room for them.
        len(drawable), 1, figsize=(max(7.0, 1.1 * max(len(rows) for _, rows in drawable) + 2),
                                   (5.2 if report.reference else 4.2) * len(drawable)),
        squeeze=False,
    )
    for axes, (section, rows) in zip(axes_list[:, 0], drawable):
        sources = list(dict.fromkeys(row.source for row in rows))
        _draw_section(axes, section, rows, sources)
    figure.suptitle("envkit comparison (mean ± std; hatched bars: published numbers)" if report.reference
                    else "envkit comparison (mean ± std)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_stream(path) as stream:
            # No "Software" text chunk: the same report gives the same bytes.
            figure.savefig(stream, format="png", dpi=110, metadata={"Software": None})
    finally:
        pyplot.close(figure)

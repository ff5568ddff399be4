"""The report's figures, drawn once by matplotlib: the HTML page saves each as inline SVG, `envkit report --plot`
the same figures as one PNG (envkit.runs.plot), so their bounds, labels and order are this module's alone.

Each comparison (a report section, as envkit.runs.page_adapter gives it) gets what it measured (report.yaml's
panels), its speed-ups, the first epoch beside the steady state, the time to reach its goal and its recorded
series as curves (one line per target). Every figure is bounded: at most MAX_TARGETS bars or lines, MAX_POINTS
points per line, MAX_PANELS panels and MAX_CURVES series, and its caption says what was left out; figures are
drawn for the first MAX_SECTIONS comparisons.

Inline SVG needs no script and loads nothing: text stays text (svg.fonttype none, in the reader's own
sans-serif font), and each figure gets its own hash salt so that two figures' clip-path IDs never clash
while the same report still gives the same bytes (no date in the SVG's metadata, no software in the PNG's).
matplotlib is imported inside the functions that draw (and forced onto the headless Agg backend) so that the
rest of envkit never pays for it or needs a display; it is the optional extra ``report``, and
``require_matplotlib`` says so in one line.
"""

from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass

from envkit import DISTRIBUTION
from envkit.errors import EnvkitError
from envkit.runs.model import LINE_STYLES, MARKERS, drawn_value, identical, identical_groups
from envkit.runs.page_model import Comparison, Curve, Target
from envkit.runs.rows import CURVE_POINTS
from envkit.runs.welch import CONFIDENCE

MAX_TARGETS = 16  # bars or lines per figure
MAX_POINTS = 250
MAX_CURVES = 4  # series drawn per comparison
MAX_PANELS = 6  # panels of what a comparison measured
MAX_SECTIONS = 8  # comparisons that get figures, on the page and in the PNG
HATCH = "//"  # published rows: hatched, so they cannot pass for ours
# For each installer: a `uv tool install` environment has no pip, and pipx's is its own.
INSTALL_HINT = (
    f"uv tool install '{DISTRIBUTION}[report]', pipx install '{DISTRIBUTION}[report]' "
    f"or pip install '{DISTRIBUTION}[report]'"
)


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


@dataclass(frozen=True)
class Figure:
    title: str
    drawn: object  # the matplotlib figure, saved as SVG (svg_text) or PNG (png_bytes), then closed (close)
    caption: str
    left_out: str = ""  # what its bounds left out, in words ("" when nothing)
    tight: bool = True  # fit the saved figure to its (long) tick labels; a curve's fixed margins need none


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False  # a name is drawn as written: "loss$\\x$" is no formula
    from matplotlib import pyplot

    return pyplot


def svg_text(figure: Figure, salt: str) -> str:
    """The figure as an <svg> element, ready to sit in the page (``tight``: at the cost of a second draw; a layout
    engine costs more)."""
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": salt, "svg.fonttype": "none", "font.family": "sans-serif"}):
        buffer = io.StringIO()
        figure.drawn.savefig(
            buffer, format="svg", metadata={"Date": None}, bbox_inches="tight" if figure.tight else None
        )
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # the XML prolog and DOCTYPE have no place inside HTML


def png_bytes(figure: Figure, dpi: int) -> bytes:
    """The figure as PNG (no "Software" chunk: the same figure gives the same bytes)."""
    buffer = io.BytesIO()
    figure.drawn.savefig(
        buffer, format="png", dpi=dpi, metadata={"Software": None}, bbox_inches="tight" if figure.tight else None
    )
    return buffer.getvalue()


def close(figures: list[Figure]) -> None:
    for figure in figures:
        _pyplot().close(figure.drawn)


def _bounded(targets: list[Target], what: str) -> tuple[list[Target], str]:
    """The first MAX_TARGETS targets, and what that left out in words (the caption's and the plot's)."""
    if len(targets) <= MAX_TARGETS:
        return targets, ""
    return targets[:MAX_TARGETS], f"The first {MAX_TARGETS} of {len(targets)} {what} are drawn; the table lists all."


def _said(left_out: str) -> str:
    return f" {left_out}" if left_out else ""


def _errors(given: list[tuple | None]) -> list[list[float]]:
    """matplotlib's error bars, below and above each value: a (mean, spread) measure's spread on both sides, a
    (value, low, high) interval's ends (0 where a row has no measure)."""
    below, above = [], []
    for measure in given:
        value, *ends = measure or (0.0, 0.0)
        low, high = (value - ends[0], value + ends[0]) if len(ends) == 1 else ends
        below.append(value - low)
        above.append(high - value)
    return [below, above]


def _bars(axes, labels: list[str], given: list[tuple | None], published: list[bool], colour: str) -> None:
    """Horizontal bars in the table's order, error bars a measure's spread or an interval's ends; a row without
    a measure gets no bar and no number."""
    _grouped(axes, labels, [("", given, colour)], published)


def _grouped(axes, labels: list[str], bars: list[tuple[str, list, str]], published: list[bool]) -> None:
    """``_bars`` with several bars per row side by side: a (legend name, measures, colour) each."""
    height = 0.8 / len(bars)
    for index, (name, given, colour) in enumerate(bars):
        drawn = axes.barh(
            [row + (index - (len(bars) - 1) / 2) * height for row in range(len(labels))],
            [drawn_value(measure[0]) if measure else 0.0 for measure in given],
            height,
            xerr=[[drawn_value(error) for error in side] for side in _errors(given)],
            capsize=3,
            color=colour,
            edgecolor="black",
            linewidth=0.5,
            label=name or None,
        )
        for patch, is_published in zip(drawn, published):
            patch.set_hatch(HATCH if is_published else "")
        axes.bar_label(drawn, labels=[f"{m[0]:.3g}" if m else "" for m in given], padding=4, fontsize=8)
    if len(bars) > 1:
        axes.legend(fontsize=7, loc="best")
    axes.set_yticks(range(len(labels)), labels, fontsize=8)
    axes.invert_yaxis()  # the table's order, top to bottom
    axes.margins(x=0.2)


def _height(rows: int) -> float:
    return 1.2 + 0.38 * rows


def _bar_chart(targets: list, values: list, published: list[bool], colour: str):
    """One panel of horizontal bars, a row per target: the speed-up's and the time to a goal's."""
    figure, axes = _pyplot().subplots(figsize=(7, _height(len(targets))))
    _bars(axes, [target.label for target in targets], values, published, colour)
    return figure, axes


def speedup_figure(comparison: Comparison) -> Figure | None:
    targets = [target for target in comparison.targets if target.speedup is not None]
    if not targets:
        return None
    targets, left_out = _bounded(targets, "rows with a speed-up")
    figure, axes = _bar_chart(
        targets, [target.speedup for target in targets], [target.published is not None for target in targets], "C0"
    )
    axes.axvline(1.0, color="grey", linewidth=0.8, linestyle="--")
    axes.set_xlabel(f"speed-up ({comparison.speedup_name}) against the baseline")
    caption = (
        f"Speed-up against the baseline, {comparison.baseline}: error bars are the ratio's {CONFIDENCE:.0%} "
        "interval from the runs (Welch's t interval on log times; none for a side of one run)."
        + (" Hatched bars are published numbers." if any(target.published for target in targets) else "")
        + _said(left_out)
    )
    return Figure("Speed-up", figure, caption, left_out)


def warmup_figure(comparison: Comparison) -> Figure | None:
    targets = [target for target in comparison.targets if target.first_epoch is not None]
    if not targets:
        return None
    targets, left_out = _bounded(targets, "rows with a first epoch")
    labels = [target.label for target in targets]
    steady = [target.steady_epoch for target in targets]
    panels = 2 if any(steady) else 1
    figure, axes = _pyplot().subplots(
        1, panels, figsize=(4.5 * panels + 1, _height(len(targets))), squeeze=False, layout="constrained"
    )
    _bars(axes[0][0], labels, [(target.first_epoch, 0.0) for target in targets], [False] * len(targets), "C1")
    axes[0][0].set_xlabel("first epoch (s): compile and warm-up")
    if panels == 2:
        _bars(axes[0][1], labels, steady, [False] * len(targets), "C2")
        axes[0][1].set_xlabel("later epochs (s/epoch, mean ± std)")
        axes[0][1].tick_params(labelleft=False)  # the same rows as on the left: their names once
    caption = (
        "The first epoch (compilation on XLA, warm-up, data loading) apart from the steady state; "
        "a row without later epochs (a one-epoch run) has no steady-state bar." + _said(left_out)
    )
    return Figure("First epoch and steady state", figure, caption, left_out)


def _thinned(curve: Curve) -> tuple[list[float], list[float]]:
    """At most MAX_POINTS evenly spaced points, the first and last always kept."""
    count = len(curve.steps)
    if count <= MAX_POINTS:
        return list(curve.steps), list(curve.values)
    picked = sorted({round(i * (count - 1) / (MAX_POINTS - 1)) for i in range(MAX_POINTS)})
    return [curve.steps[i] for i in picked], [curve.values[i] for i in picked]


def draw_series(axes, lines: list[tuple[str, Curve]]) -> tuple[list[int | None], bool]:
    """One series' curves on ``axes``, a (label, curve) each: the page's SVG and the PNG plot draw them with this one
    function. Each line gets its own colour, line style and marker, so identical curves stay apart; a per-step
    series' first step is a hollow marker of its own (compile and warm-up show there). Returns which curve each
    repeats (model.identical) and whether a line was thinned to MAX_POINTS."""
    thinned = False
    for index, (label, curve) in enumerate(lines):
        steps, values = _thinned(curve)
        values = [drawn_value(value) for value in values]
        thinned = thinned or len(steps) < len(curve.steps)
        colour, style, marker = f"C{index % 10}", LINE_STYLES[index % len(LINE_STYLES)], MARKERS[index % len(MARKERS)]
        axes.plot(
            steps,
            values,
            marker=marker if len(steps) <= 30 else None,
            markersize=3,
            color=colour,
            label=label,
            linestyle=style,
        )
        if curve.per_step:
            axes.plot(steps[:1], values[:1], marker="o", markersize=7, fillstyle="none", linestyle="none", color=colour)
    return identical([curve for _, curve in lines]), thinned


def _final_and_first(label: str, curve: Curve) -> str:
    """'cpu: final 0.95 ± 0.01' and, for a per-step series, its first step apart."""
    first = f", first step {curve.first.mean:.4g} ± {curve.first.std:.2g}" if curve.per_step and curve.first.n else ""
    final = f"final {curve.final.mean:.4g} ± {curve.final.std:.2g}" if curve.final.n else "no finite final value"
    said = f" ({curve.not_finite} NaN/inf logged: gaps in the line)" if curve.not_finite else ""
    return f"{label}: {final}{first}{said}"


def _identical(labels: list[str], repeats: list[int | None]) -> str:
    listed = "; ".join(identical_groups(labels, repeats))
    return f" Identical curves (drawn in other line styles and markers): {listed}." if listed else ""


def curve_names(comparison: Comparison) -> list[str]:
    return sorted({name for target in comparison.targets for name in target.curves})


def curve_figure(comparison: Comparison, name: str) -> Figure | None:
    targets = [target for target in comparison.targets if name in target.curves]
    if not targets:
        return None
    targets, left_out = _bounded(targets, "targets recording it")
    pyplot = _pyplot()
    figure, axes = pyplot.subplots(figsize=(7, 3.6))
    figure.subplots_adjust(left=0.12, right=0.98, bottom=0.13, top=0.97)
    repeats, thinned = draw_series(axes, [(target.label, target.curves[name]) for target in targets])
    if comparison.goal is not None and comparison.goal.metric == name:
        axes.axhline(comparison.goal.value, color="grey", linewidth=0.8, linestyle="--", label=comparison.goal.text)
    axes.set_xlabel(targets[0].steps_name)
    axes.set_ylabel(name)
    axes.legend(fontsize=7, loc="best")
    steps_name = targets[0].steps_name
    first = " and the first step (hollow marker: compile and warm-up)" if targets[0].curves[name].per_step else ""
    caption = (
        f"{name} per {steps_name}, one line per target: the mean over its runs. Each run's final value{first}, "
        "mean ± std across the runs: "
        + "; ".join(_final_and_first(target.label, target.curves[name]) for target in targets)
        + "."
        + _identical([target.label for target in targets], repeats)
        + (f" Lines are thinned to {MAX_POINTS} evenly spaced points." if thinned else "")
        + (
            f" A series longer than {CURVE_POINTS} steps keeps every n-th step (the report's curves)."
            if any(target.curves[name].stride > 1 for target in targets)
            else ""
        )
        + _said(left_out)
    )
    return Figure(name, figure, caption, left_out, tight=False)


def goal_figure(comparison: Comparison) -> Figure | None:
    goal = comparison.goal
    targets = [target for target in comparison.targets if target.time_to_goal is not None]
    if goal is None or not targets:
        return None
    targets, left_out = _bounded(targets, "targets that reached it")
    figure, axes = _bar_chart(targets, [target.time_to_goal for target in targets], [False] * len(targets), "C3")
    axes.set_xlabel(f"seconds to reach {goal.text}")
    caption = (
        f"Time until {goal.text}, mean ± std over the runs that reached it (the table says how many did)."
        + _said(left_out)
    )
    return Figure(f"Time to reach {goal.text}", figure, caption, left_out)


def named(titles: list[str], shown: int = 5) -> str:
    """The first ``shown`` of ``titles``, and how many more: what a bound left out, in one line."""
    return ", ".join(titles[:shown]) + (f" and {len(titles) - shown} more" if len(titles) > shown else "")


def title_figure(text: str, points: float, width: float) -> Figure:
    """A title as a figure of its own, ``width`` inches wide, wrapped to it: a long title (an experiment's
    arguments, a lock) must not run off the picture (bug B4)."""
    # An average character is about 0.55 of the font's size wide.
    lines = textwrap.wrap(text, max(12, int(width * 72 / (0.55 * points)))) or [text]
    figure = _pyplot().figure(figsize=(width, (len(lines) * 1.5 + 0.5) * points / 72))
    figure.text(0.01, 0.5, "\n".join(lines), fontsize=points, va="center", ha="left")
    return Figure(text, figure, "", tight=False)


def measured_figure(comparison: Comparison) -> Figure | None:
    """What each row measured, mean ± std over its runs: a panel per report.yaml panel, its columns' bars side by
    side per row (E3: test accuracy beside seconds per epoch; a command's comparison: wall time, then a panel per
    metric)."""
    keys = {key for _, bars in comparison.panels for key, _ in bars}
    targets = [target for target in comparison.targets if any(target.measured.get(key) for key in keys)]
    if not targets:
        return None
    targets, left_out = _bounded(targets, "rows with a measure")
    panels = comparison.panels[:MAX_PANELS]
    if len(comparison.panels) > MAX_PANELS:
        names = [" + ".join(name for _, name in bars) for _, bars in comparison.panels[MAX_PANELS:]]
        left_out = " ".join(filter(None, [left_out, f"The panels {named(names)} are left out (at most {MAX_PANELS})."]))
    # No layout engine: the saved figure is fitted to its tick labels (svg_text's tight box), and only the first
    # panel names the rows; constrained layout cost 0.8 of a 3-panel figure's 1.2 s.
    figure, axes = _pyplot().subplots(
        1, len(panels), figsize=(max(7.0, 4.5 * len(panels) + 1), _height(len(targets))), squeeze=False
    )
    labels, published = [target.label for target in targets], [target.published is not None for target in targets]
    for index, (axis, bars) in enumerate(panels):
        drawn = [
            (name, [target.measured.get(key) for target in targets], f"C{n}") for n, (key, name) in enumerate(bars)
        ]
        _grouped(axes[0][index], labels, drawn, published)
        axes[0][index].set_xlabel(axis)
        if index:
            axes[0][index].tick_params(labelleft=False)  # the same rows as on the left: their names once
    names = "; ".join(" + ".join(name for _, name in bars) for _, bars in panels)
    caption = (
        f"What each row measured ({names}), mean ± std over its runs."
        + (" Hatched bars are published numbers." if any(published) else "")
        + _said(left_out)
    )
    return Figure("Measured", figure, caption, left_out)


def comparison_figures(comparison: Comparison) -> tuple[list[Figure], str]:
    """Every figure of one comparison, in the order the page shows them and the plot stacks them, and which
    series were left out of them ("" when none)."""
    names = curve_names(comparison)
    drawn = [
        measured_figure(comparison),
        speedup_figure(comparison),
        warmup_figure(comparison),
        goal_figure(comparison),
        *(curve_figure(comparison, name) for name in names[:MAX_CURVES]),
    ]
    left_out = (
        f"Curves of {len(names) - MAX_CURVES} more series are left out: {', '.join(names[MAX_CURVES:])}."
        if len(names) > MAX_CURVES
        else ""
    )
    return [figure for figure in drawn if figure is not None], left_out

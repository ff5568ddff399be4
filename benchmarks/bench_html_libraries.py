"""The HTML page's figures drawn by matplotlib (inline SVG, what envkit ships), Vega-Lite through altair (its
bundles inline) and plotly (one inline bundle), side by side: page size and time to write, per sample page.

Each library draws the same figures from the same page data (envkit.runs.page_adapter on tests/data/results):
the speed-up bars with error bars, one line per target per recorded series, and the time to the goal. The
tables are envkit's in every case. Run it with an interpreter that has altair (with vl-convert-python, which
inlines Vega's bundles) and plotly beside envkit's dependencies, e.g. a scratch venv and PYTHONPATH=. ; a
library that does not import is reported as such. Figures only: nothing is asserted.

usage: PYTHONPATH=. python benchmarks/bench_html_libraries.py [--repeat N]
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from pathlib import Path

from envkit.runs.html_page import render_page
from envkit.runs.page_adapter import page_from_report
from envkit.runs.page_model import Page
from envkit.runs.report import build_report
from envkit.runs.results import load_results

REPO = Path(__file__).resolve().parent.parent
SAMPLES = {
    "commands": (REPO / "tests/data/results/commands", REPO / "tests/data/page/envkit.yaml", False),
    "mixed --reference": (REPO / "tests/data/results/mixed", REPO / "envkit.yaml", True),
}


def _records(page: Page) -> list[tuple[str, list[dict]]]:
    """Per figure, the rows a declarative library is given: (figure kind, records)."""
    figures = []
    for comparison in page.comparisons:
        bars = [
            {"target": t.label, "value": t.speedup[0], "low": t.speedup[0] - t.speedup[1], "high": sum(t.speedup)}
            for t in comparison.targets
            if t.speedup
        ]
        if bars:
            figures.append(("bars", bars))
        goal = [
            {"target": t.label, "value": t.time_to_goal[0], "low": t.time_to_goal[0] - t.time_to_goal[1],
             "high": sum(t.time_to_goal)}
            for t in comparison.targets
            if t.time_to_goal
        ]  # fmt: skip
        if goal:
            figures.append(("bars", goal))
        for name in sorted({name for t in comparison.targets for name in t.curves}):
            points = [
                {"target": t.label, "step": step, "value": mean}
                for t in comparison.targets
                if name in t.curves
                for step, mean in zip(t.curves[name].steps, t.curves[name].values)
            ]
            figures.append(("lines", points))
    return figures


def altair_figures(page: Page) -> str:
    import altair as alt

    charts = []
    for kind, records in _records(page):
        data = alt.Data(values=records)
        if kind == "bars":
            base = alt.Chart(data).encode(y=alt.Y("target:N", sort=None))
            charts.append(base.mark_bar().encode(x="value:Q") + base.mark_errorbar().encode(x="low:Q", x2="high:Q"))
        else:
            charts.append(alt.Chart(data).mark_line(point=True).encode(x="step:Q", y="value:Q", color="target:N"))
    return alt.vconcat(*charts).to_html(inline=True) if charts else ""


def plotly_figures(page: Page) -> str:
    import plotly.graph_objects as go

    parts = []
    for kind, records in _records(page):
        if kind == "bars":
            figure = go.Figure(
                go.Bar(
                    y=[r["target"] for r in records],
                    x=[r["value"] for r in records],
                    orientation="h",
                    error_x={"type": "data", "array": [r["high"] - r["value"] for r in records]},
                )
            )
        else:
            figure = go.Figure()
            for target in dict.fromkeys(r["target"] for r in records):
                mine = [r for r in records if r["target"] == target]
                figure.add_scatter(x=[r["step"] for r in mine], y=[r["value"] for r in mine], name=target)
        # One shared bundle: the first figure carries plotly.js, the others use it.
        parts.append(figure.to_html(full_html=False, include_plotlyjs=not parts))
    return "".join(parts)


def _tables_only(html: str) -> str:
    return re.sub(r"<figure.*?</figure>", "", html, flags=re.S)


def measure(page: Page, repeat: int) -> dict[str, tuple[float, int] | str]:
    """Per library: (median seconds to draw and write the page, its bytes), or why it could not run."""
    tables = _tables_only(render_page(page))  # the same tables beside every library's figures, made once
    drawers = {
        "matplotlib (inline SVG)": render_page,
        "altair (Vega-Lite, inline bundles)": lambda p: tables + altair_figures(p),
        "plotly (one inline bundle)": lambda p: tables + plotly_figures(p),
    }
    found: dict[str, tuple[float, int] | str] = {}
    for name, draw in drawers.items():
        try:
            times, size = [], 0
            for _ in range(repeat):
                started = time.perf_counter()
                size = len(draw(page).encode("utf-8"))
                times.append(time.perf_counter() - started)
            found[name] = (statistics.median(times), size)
        except ImportError as exc:
            found[name] = f"not importable here ({exc.name})"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'sample':20} {'library':38} {'write s':>8} {'page KB':>9}")
    for sample, (directory, config, reference) in SAMPLES.items():
        results, warnings = load_results(directory)
        page = page_from_report(build_report(results, reference=reference, config=config), warnings)
        for library, figure in measure(page, args.repeat).items():
            if isinstance(figure, str):
                print(f"{sample:20} {library:38} {figure}")
            else:
                print(f"{sample:20} {library:38} {figure[0]:8.2f} {figure[1] / 1000:9.1f}")


if __name__ == "__main__":
    main()

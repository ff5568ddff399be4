"""`envkit report --html FILE`: the comparison as one self-contained HTML page.

The page is drawn from plain data (envkit.runs.page_model), so it holds no grouping or formatting of its
own: real HTML tables (a screen reader, a text browser and grep read them), figures as inline SVG
(envkit.runs.figures), and `envkit diff`'s environment differences in <details>. It has no script
and requests nothing; its Content-Security-Policy forbids any load. The template is
templates/report/page.html.j2 (envkit/templates/ in the wheel). Figures per page are bounded
(figures.MAX_SECTIONS comparisons get figures; the rest are tables alone, and the page says so).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from envkit.project.secrets import redacted
from envkit.runs.figures import INSTALL_HINT, MAX_SECTIONS, close, comparison_figures, matplotlib_problem, svg_text
from envkit.runs.page_model import Comparison, Measure, Page
from envkit.support.atomic import write_bytes_atomic

TEMPLATE = "report/page.html.j2"
NO_FIGURES = "This page has its tables without figures"
LISTED = 20  # failed runs per comparison and skipped files listed by name; the rest are counted
NUMBER = re.compile(r"^[-+]?[\d.]+(e[-+]?\d+)?[×%]?( ± [\d.]+(e[-+]?\d+)?)?[×%]?$")


@dataclass(frozen=True)
class _Shown:
    """A figure as the page holds it: its <svg> element."""

    title: str
    svg: str
    caption: str


@dataclass(frozen=True)
class _Drawn:
    comparison: Comparison
    figures: list[_Shown]
    left_out: str

    @property
    def intro(self) -> list[tuple[str, list[str]]]:
        """The intro's lines as paragraphs ("p", [line]) and lists ("ul", items): the report's "- " lines."""
        blocks: list[tuple[str, list[str]]] = []
        for line in self.comparison.intro:
            if line.startswith("- ") and blocks and blocks[-1][0] == "ul":
                blocks[-1][1].append(line[2:])
            else:
                blocks.append(("ul", [line[2:]]) if line.startswith("- ") else ("p", [line]))
        return blocks


def _code(text: str):
    """Markdown's `code` of the report's prose as <code>, the rest escaped."""
    from markupsafe import Markup, escape

    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(text))))


def _measure(value: Measure | None) -> str:
    return "–" if value is None else f"{value[0]:.3f} ± {value[1]:.3f}"


def _environment():
    import jinja2

    from envkit.support.packaged import packaged_templates

    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(packaged_templates()),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    environment.filters.update(code=_code, measure=_measure, numeric=lambda cell: bool(NUMBER.match(cell)))
    return environment


def render_page(page: Page) -> str:
    """The page's HTML text: the same page gives the same text."""
    # Without matplotlib (the report extra) the page keeps its tables, and says what would draw its figures.
    problem = matplotlib_problem()
    drawn = []
    for index, comparison in enumerate(page.comparisons):
        figures, left_out = comparison_figures(comparison) if index < MAX_SECTIONS and problem is None else ([], "")
        # Each figure its own salt: two figures' clip-path IDs never clash.
        shown = [_Shown(f.title, svg_text(f, f"envkit-{index}-{n}"), f.caption) for n, f in enumerate(figures)]
        close(figures)
        drawn.append(_Drawn(comparison, shown, left_out))
    beyond = len(page.comparisons) - MAX_SECTIONS
    if problem:
        left_out = f"{NO_FIGURES}: matplotlib {problem}; {INSTALL_HINT} draws them."
    elif beyond > 0:
        left_out = (
            f"Figures are drawn for the first {MAX_SECTIONS} comparisons; the other {beyond} have their tables only."
        )
    else:
        left_out = ""
    text = _environment().get_template(TEMPLATE).render(page=page, comparisons=drawn, left_out=left_out, listed=LISTED)
    return redacted(text)  # a token a run's arguments or stderr hold: the page is committed and sent


def write_page(page: Page, path: Path) -> int:
    """Write the page atomically; its size in bytes."""
    # A name the file system gave as undecodable bytes (a skipped bad-\xff.json) holds a lone surrogate, which
    # UTF-8 cannot encode: it is written as the escape Python prints for it.
    data = render_page(page).encode("utf-8", "backslashreplace")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, data)
    return len(data)

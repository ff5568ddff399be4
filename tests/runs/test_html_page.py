"""`envkit report --html`: the page's text against goldens, its tables' figures, its self-containment, its
bounds, and bad input by envkit report's one-line rules."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from html.parser import HTMLParser

import pytest
from paths import DATA
from report_golden import check_golden

from envkit.cli import main
from envkit.runs import figures
from envkit.runs.figures import MAX_SECTIONS
from envkit.runs.html_page import LISTED, render_page
from envkit.runs.model import Curve
from envkit.runs.page_model import Comparison, Page, Target
from envkit.runs.results import Stat
from envkit.runs.welch import ratio_interval

RESULTS = DATA / "results"
PROJECT = DATA / "page" / "envkit.yaml"  # not there: report.yaml beside it names the goal of `train`
PAGES = {
    "mixed": (RESULTS / "mixed", ()),
    "mixed-reference": (RESULTS / "mixed", ("--reference",)),
    "backends": (RESULTS / "backends", ()),
    "e3": (RESULTS / "e3", ()),
    "commands": (RESULTS / "commands", ("--config", str(PROJECT))),
}


class _Page(HTMLParser):
    """The page as a reader without its figures sees it: text lines, tables as cell rows, and every URL."""

    BLOCKS = {"p", "li", "tr", "h1", "h2", "h3", "summary", "figcaption", "title", "caption"}

    def __init__(self, text: str):
        super().__init__()
        self.lines: list[str] = []
        self.tables: list[list[list[str]]] = []
        self.urls: list[str] = []
        self.svgs: list[str] = []
        self.scripts = 0
        self._line: list[str] = []
        self._skip = 0
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._svg_start: int | None = None
        self._text = text
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.urls += [value for name, value in attrs if name in ("href", "src", "xlink:href", "action") and value]
        self.scripts += tag == "script"
        if tag in ("svg", "style", "script"):
            self._skip += 1
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("svg", "style", "script"):
            self._skip -= 1
        if tag in ("td", "th") and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._line.append(" | ")
        elif tag == "tr":
            self.tables[-1].append(self._row)
        if tag in self.BLOCKS:
            line = " ".join("".join(self._line).split()).strip(" |")
            if line:
                self.lines.append(line)
            self._line = []

    def handle_data(self, data):
        if self._skip:
            return
        self._line.append(data)
        if self._cell is not None:
            self._cell.append(data)


def _write(name: str, tmp_path) -> tuple[str, str]:
    directory, options = PAGES[name]
    page = tmp_path / f"{name}.html"
    assert main(["report", str(directory), *options, "--html", str(page)]) == 0
    return page.read_text(encoding="utf-8"), str(page)


@pytest.mark.parametrize("name", sorted(PAGES))
def test_page_text_matches_golden(name, tmp_path, update_golden, capsys):
    text, _ = _write(name, tmp_path)
    # The skipped files are named by their path: the golden holds it from the data folder on, wherever the
    # checkout is.
    lines = "\n".join(_Page(text).lines).replace(str(DATA), "tests/data")
    check_golden(f"page-{name}.txt", lines + "\n", update_golden)


@pytest.mark.parametrize("name", sorted(PAGES))
def test_page_loads_nothing_and_runs_nothing(name, tmp_path, capsys):
    text, _ = _write(name, tmp_path)
    page = _Page(text)
    assert page.scripts == 0
    assert all(url.startswith("#") for url in page.urls), [url for url in page.urls if not url.startswith("#")]
    assert all(url.startswith("#") for url in re.findall(r"url\(([^)]*)\)", text))  # the SVGs' own clip paths
    assert "@import" not in text and "@font-face" not in text
    assert "default-src 'none'" in text  # and the browser refuses any load the page might still try


def test_same_results_give_the_same_bytes(tmp_path, capsys):
    assert _write("commands", tmp_path)[0] == _write("commands", tmp_path / "again")[0]


def test_the_tables_hold_the_reports_numbers(tmp_path, capsys):
    """Every cell of the markdown report's tables is a cell of the page's (the same columns and the model's
    curves draw both): the comparison, then its series' first step apart from the steady state."""
    text, _ = _write("commands", tmp_path)
    markdown = capsys.readouterr().out
    rows = [line.strip("|").split(" | ") for line in markdown.splitlines() if line.startswith("| ")]
    table, series = _Page(text).tables[:2]
    expected = [[cell.strip() for cell in row] for row in rows if row[0].strip() != "---"]
    assert table + series == expected  # the speed-up's interval and verdict too: the model's, in both
    assert series[0] == ["where", "series", "runs", "steps", "final value", "first step"]
    assert ["cpu on envkit-cpu:latest", "3", "0", "42.23 ± 1"] == table[1][:4]
    # Before: the page computed a spread of its own. Now the model's interval (Welch on log times) and verdict.
    speedup = statistics.mean((41.0, 43.5, 42.2)) / statistics.mean((6.1, 5.8))
    low, high = ratio_interval([41.0, 43.5, 42.2], [6.1, 5.8])
    assert table[1][6] == "1.00× baseline"
    assert table[2][6] == f"{speedup:.2f}× faster (95% {low:.2f}–{high:.2f}; 3 and 2 runs)"
    caption = (
        "baseline: cpu on envkit-cpu:latest (the first row, in the table's order, that ran with its device checked)"
    )
    assert caption in markdown and any(caption in line for line in _Page(text).lines)


def test_runs_left_out_say_why(tmp_path, capsys):
    """A failed run names its stderr's last line; a CPU run of an accelerator's target (its device block shows
    no accelerator initialised) is listed as left out of the speed-ups, beside the model's own row for it."""
    results = tmp_path / "results"
    results.mkdir()
    for path in (RESULTS / "commands").glob("*.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        if path.stem == "train-cuda-3":
            record["run"]["stderr_tail"] = [
                "Traceback (most recent call last):",
                "RuntimeError: CUDA out of memory",
                "",
            ]
        if path.stem == "train-cuda-2":
            record["run"]["device"] = {"observed": True, "accelerator": None, "label": "cuda"}
        (results / path.name).write_text(json.dumps(record), encoding="utf-8")
    page = tmp_path / "page.html"
    assert main(["report", str(results), "--config", str(PROJECT), "--html", str(page)]) == 0
    lines = _Page(page.read_text(encoding="utf-8")).lines
    assert "train-cuda-3: exit status 1 (stderr: RuntimeError: CUDA out of memory), left out of the numbers" in lines
    stand_in = [line for line in lines if line.startswith("train-cuda-2: ran on ")]
    assert stand_in and stand_in[0].endswith("a CPU run, left out of the speed-ups")
    table = _Page(page.read_text(encoding="utf-8")).tables[0]
    assert any(row[0].endswith("(CPU run)") and row[6] == "–" for row in table[1:])


def test_failed_runs_and_the_time_to_the_goal(tmp_path, capsys):
    lines = _Page(_write("commands", tmp_path)[0]).lines
    assert "train-cuda-3: exit status 1, left out of the numbers" in lines
    for device, place in (("cpu", "cpu on envkit-cpu:latest"), ("cuda", "cuda on envkit-cuda:latest")):
        times = []  # recomputed with the json module: the wall time up to the first logged step with acc >= 0.8
        for path in sorted((RESULTS / "commands").glob(f"train-{device}-*.json")):
            document = json.loads(path.read_text())
            values = document["series"].get("acc", {}).get("value", [])
            reached = [i for i, value in enumerate(values) if value >= 0.8]
            times += [document["run"]["wall_time_s"] * (reached[0] + 1) / len(values)] if reached else []
        assert f"{place} | {len(times)} of {len(times)} | {sum(times) / len(times):.3f} ± {_std(times):.3f}" in lines


def _std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5


def test_what_differed_is_envkit_diffs_difference(tmp_path, capsys):
    lines = _Page(_write("commands", tmp_path)[0]).lines
    a, b = (RESULTS / "commands" / f"train-{device}-1.json" for device in ("cpu", "cuda"))
    diff = subprocess.run(
        [sys.executable, "-m", "envkit", "diff", str(a), str(b)], capture_output=True, text=True, check=False
    )
    changes = [line.strip() for line in diff.stdout.splitlines() if line.startswith("  ")]
    assert changes and all(change in lines for change in changes)
    assert "image_id: sha256:" + "1" * 64 + " -> sha256:" + "2" * 64 in lines
    assert "git_dirty: False -> True" in lines


def test_every_figure_draws(tmp_path, capsys):
    text, _ = _write("commands", tmp_path)
    figures = re.findall(r"<figure.*?</figure>", text, flags=re.S)
    titles = [re.search(r'aria-label="([^"]*)"', figure)[1] for figure in figures]
    assert titles == ["Measured", "Speed-up", "Time to reach acc ≥ 0.8", "acc", "loss"]
    for figure in figures:
        assert figure.count("<svg") == 1 and len(re.findall(r"<path", figure)) > 10


def test_the_first_epoch_is_drawn_apart_from_the_steady_state(tmp_path, capsys):
    text, _ = _write("mixed", tmp_path)
    assert text.count('aria-label="First epoch and steady state"') == 3


def _target(index: int, points: int = 3) -> Target:
    steps = tuple(float(s) for s in range(points))
    return Target(
        label=f"target {index}",
        cells=(f"target {index}",),
        speedup=(1.0 + index, 0.1),
        curves={"loss": Curve(steps, steps, 1, Stat(0.0, 0.0, 1), Stat(1.0, 0.5, 1))},
    )


def test_figures_are_bounded_and_say_what_they_left_out():
    many = Comparison("many", (), ("target",), tuple(_target(i, points=5000) for i in range(40)))
    drawn, _ = figures.comparison_figures(many)
    speedup, curve = drawn
    assert figures.svg_text(speedup, "salt").count(">target ") == figures.MAX_TARGETS
    assert f"The first {figures.MAX_TARGETS} of 40 rows with a speed-up are drawn" in speedup.caption
    assert f"thinned to {figures.MAX_POINTS} evenly spaced points" in curve.caption
    figures.close(drawn)
    page = Page(
        "bounded",
        "",
        tuple(Comparison(f"c{i}", (), ("target",), (_target(i),)) for i in range(20)),
        skipped=tuple(f"file{i}.json: not a results file" for i in range(LISTED + 5)),
    )
    text = render_page(page)
    assert f"file{LISTED - 1}.json" in text and f"file{LISTED}.json" not in text
    assert "and 5 more (envkit report warns of each)" in text
    assert text.count("<figure") == 2 * MAX_SECTIONS
    beyond = 20 - MAX_SECTIONS
    assert f"the other {beyond} have their tables only" in text


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--html", "{tmp}/page.txt"], "--html {tmp}/page.txt: the page is an HTML file, give a name ending in .html"),
        (
            ["--html", "{tmp}/dir.html"],
            "--html {tmp}/dir.html: is a directory, give the page's file name (e.g. {tmp}/dir.html/report.html)",
        ),
        (
            ["--html", "{tmp}/file/page.html"],
            "--html {tmp}/file/page.html: {tmp}/file is not a directory, so the page cannot go there",
        ),
    ],
    ids=["not-html", "a-directory", "parent-is-a-file"],
)
def test_bad_page_paths_are_one_line_and_write_nothing(tmp_path, capsys, argv, line):
    (tmp_path / "dir.html").mkdir()
    (tmp_path / "file").write_text("")
    before = sorted(tmp_path.rglob("*"))
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    assert main(["report", str(RESULTS / "commands"), *argv]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == "envkit: error: " + line.format(tmp=tmp_path)
    assert sorted(tmp_path.rglob("*")) == before


def test_no_results_is_the_reports_line_and_no_page(tmp_path, capsys):
    assert main(["report", str(tmp_path), "--html", str(tmp_path / "page.html")]) == 1
    assert capsys.readouterr().err.startswith(f"envkit: error: no results in {tmp_path}: it holds no *.json")
    assert not (tmp_path / "page.html").exists()


@pytest.mark.parametrize(
    "goal", ["acc", "{metric: acc}", "{metric: acc, value: true}", "{metric: acc, value: 1, at_most: 1}", "{x: 1}"]
)
def test_a_goal_that_is_not_a_metric_and_a_value_is_one_line(tmp_path, capsys, goal):
    (tmp_path / "report.yaml").write_text(f"experiments:\n  train:\n    goal: {goal}\n")
    page = tmp_path / "page.html"
    argv = ["report", str(RESULTS / "commands"), "--config", str(tmp_path / "envkit.yaml"), "--html", str(page)]
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"envkit: error: {tmp_path / 'report.yaml'}: experiments.train.goal: a mapping of metric (a name), "
        "value (a number) and at_most (true for a loss)"
    ]
    assert not page.exists()


def test_compare_hands_the_page_to_its_report_step():
    from envkit.cli import build_parser
    from envkit.cli.report import _report_args

    args = build_parser().parse_args(["compare", "--html", "out/page.html"])
    assert ("--html", "out/page.html") == _report_args(args)[2:4]


def test_a_recipes_time_to_the_goal_is_its_first_epoch_then_its_steady_ones(tmp_path, capsys):
    """E3's goal (envkit/data/report.yaml: 90% test accuracy), recomputed from the files with json alone."""
    lines = _Page(_write("e3", tmp_path)[0]).lines
    paths = sorted((RESULTS / "e3").glob("*.json"))
    assert paths
    for path in paths:
        document = json.loads(path.read_text())
        accuracies = document["metrics"]["epoch_test_accuracy"]
        reached = [i for i, value in enumerate(accuracies) if value >= 0.9]
        timing = document["timing"]
        seconds = timing["first_epoch_s"] + reached[0] * timing["steady_epoch_s"]["mean"] if reached else None
        run = document["run_name"].removeprefix("e3-batch-scaling-")
        found = [line.split(" | ", 1)[1] for line in lines if line.startswith(f"{run}: ") and " of 1 | " in line]
        assert found == [f"1 of 1 | {seconds:.3f} ± 0.000" if reached else "0 of 1 | –"]


def test_identical_curves_are_drawn_apart_and_the_caption_says_identical():
    """Issue 40 §10: before, two targets' identical curves drew as one line, and nothing said so."""
    curve = Curve(steps=(0, 1, 2), values=(2.0, 1.0, 0.5), runs=1, first=Stat(2.0, 0.0, 1), final=Stat(0.5, 0.0, 1))
    targets = tuple(Target(label=label, cells=(), curves={"loss": curve}) for label in ("cpu", "cpu-1t"))
    figure = figures.curve_figure(Comparison("t", (), (), targets), "loss")
    assert "Identical curves (drawn in other line styles and markers): cpu and cpu-1t." in figure.caption
    assert "final 0.5 ± 0, first step 2 ± 0" in figure.caption
    assert "stroke-dasharray" in figures.svg_text(figure, "salt")  # the second line is dashed
    figures.close([figure])


def test_the_page_says_the_result_in_words_before_the_table_and_how_it_was_made_after(tmp_path):
    """Issue 40 §12: the page opened on a paragraph of jargon ("a row per target on its own lock…"), wall times to
    three decimals and the lock's hash twice in each row; a student reads what was faster, by how much and how
    sure first, and the details after."""
    page = tmp_path / "page.html"
    assert main(["report", str(DATA / "results" / "commands"), "--html", str(page)]) == 0
    text = page.read_text()
    said = "cuda on envkit-cuda:latest is faster than cpu on envkit-cpu:latest: 7.10× (95% interval 6.20–8.13×"
    assert text.index(said) < text.index("<table>") < text.index("How this table was made")
    assert text.index("How this table was made") < text.index("a row per target on its own lock")
    row = next(line for line in text.splitlines() if line.startswith("<tr><td>cpu on envkit-cpu:latest"))
    assert "42.23 ± 1<" in row and row.count("abababababab") == 1

"""`envkit report`, `envkit compare`, `envkit demo`: turn result files into the comparison."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envkit.cli.options import add_config, directory_option
from envkit.project import DEFAULT_CONFIG
from envkit.support.provenance_records import RESULTS_FOLDER


def register(subparsers) -> None:
    report = subparsers.add_parser(
        "report",
        help="compare the runs in a results directory (tables as in the published experiments)",
        description="Group the results files in RESULTS_DIR into comparisons (a command's runs that did the same "
        "work: experiment, arguments and data, a row per target on its own lock; a recipe's by configuration) "
        "and print them.",
    )
    report.add_argument(
        "results_dir",
        metavar="RESULTS_DIR",
        type=Path,
        help="directory the runs wrote results JSON into (ENVKIT_RESULTS_DIR; its *.json files, not subdirectories)",
    )
    _add_report_options(report)
    add_config(report)
    report.set_defaults(func=cmd_report)

    compare = subparsers.add_parser(
        "compare",
        help="run every experiment this host can run, then report",
        description="Ask `envkit doctor` which experiments this host can run, run them, then print the report.",
    )
    _add_run_options(compare, default_results=Path(RESULTS_FOLDER))
    compare.add_argument(
        "--epochs", type=_positive_int, default=None, help="epochs per run (default: each recipe's own)"
    )
    compare.add_argument("--dataset", choices=("real", "fake"), default="real", help="real data or generated fake data")
    compare.add_argument(
        "--max-steps", type=_positive_int, default=None, help="stop each run after this many steps (quick checks)"
    )
    _add_report_options(compare)
    compare.set_defaults(func=cmd_compare)

    demo = subparsers.add_parser(
        "demo",
        help="render every target, run the small comparison this machine can run, report and plot",
        description="The whole story on any machine in a few minutes: render, run small experiments, report, plot.",
    )
    _add_run_options(demo, default_results=Path(RESULTS_FOLDER, "demo"))
    demo.add_argument("--no-docker", action="store_true", help="run on this Python even when Docker is usable")
    demo.add_argument(
        "--base-image",
        metavar="IMAGE",
        default=None,
        help="base image for building the cpu image (e.g. one made by scripts/base-image.sh)",
    )
    demo.set_defaults(func=cmd_demo)


def _add_run_options(parser: argparse.ArgumentParser, default_results: Path) -> None:
    """What `compare` and `demo` share: where results go, the project, and a dry run."""
    parser.add_argument(
        "--results-dir",
        type=directory_option,
        default=default_results,
        help=f"where results go (default: {default_results})",
    )
    add_config(parser)
    parser.add_argument("--dry-run", action="store_true", help="print the commands instead of running them")


def _add_report_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("md", "csv", "json"), default="md", help="table format (default: md)")
    parser.add_argument("--plot", type=Path, metavar="FILE.png", default=None, help="also write a bar chart PNG")
    parser.add_argument(
        "--html",
        type=Path,
        metavar="FILE.html",
        default=None,
        help="also write the comparison as one self-contained HTML page (tables, figures, what differed)",
    )
    parser.add_argument(
        "--reference",
        action="store_true",
        help="add the published numbers, labelled as published, beside the runs that did the same work "
        "(the rest stand apart, saying why)",
    )
    parser.add_argument(
        "--baseline",
        metavar="LABEL",
        default=None,
        help="configuration the speed-ups are relative to, e.g. 'cpu ×1', or a command's target (else its place), "
        "e.g. 'cpu on envkit-cpu:latest' (default: the first target of the experiment's list, else the first row, "
        "that ran with its device checked; never a CPU stand-in)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="refuse to compare runs whose python, torch, TPU backend or lock differ (default: mark them)",
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number ≥ 1, got {text!r}")
    return value


def print_report(
    results_dir: Path,
    output_format: str = "md",
    plot: Path | None = None,
    reference: bool = False,
    baseline: str | None = None,
    strict: bool = False,
    config: Path = DEFAULT_CONFIG,
    html: Path | None = None,
) -> None:
    from envkit.errors import EnvkitError
    from envkit.runs.formats import render_report
    from envkit.runs.report import build_report
    from envkit.runs.results import load_results
    from envkit.runs.target_locks import current_locks

    if plot is not None:
        if plot.suffix.lower() != ".png":
            raise EnvkitError(f"--plot {plot}: the plot is a PNG file, give a name ending in .png")
        _require_matplotlib()
    if html is not None:
        _check_html(html)
    results, warnings = load_results(results_dir)
    skipped = sum(1 for warning in warnings if warning.startswith("skipped "))
    if not results:
        # One line: the first file's reason stands in the error, not on a warning line above it.
        first = warnings[0].removeprefix("skipped ") if skipped else ""
        found = (
            "it holds no *.json results files"
            if not skipped
            else f"its one *.json file is not a results file ({first})"
            if skipped == 1
            else f"none of its {skipped} *.json files is a results file (the first: {first})"
        )
        raise EnvkitError(
            f"no results in {results_dir}: {found}; run a recipe, `envkit compare` or `envkit demo` first", exit_code=1
        )
    for warning in warnings:
        print(f"envkit: warning: {warning}", file=sys.stderr)
    report = build_report(
        results,
        skipped=skipped,
        baseline=baseline,
        reference=reference,
        strict=strict,
        config=config,
        current_locks=current_locks(config, {run.target for run in results if run.recipe is None}),
    )
    # The report holds what it shows (bounded curves, not the runs' series): the plot's memory is not added to theirs.
    del results
    for warning in report.warnings:
        print(f"envkit: warning: {warning}", file=sys.stderr)
    sys.stdout.write(render_report(report, output_format))
    sys.stdout.flush()
    if plot is not None:
        from envkit.runs.plot import write_plot

        try:
            left_out = write_plot(report, plot)
        except OSError as exc:
            raise EnvkitError(f"cannot write the plot {plot}: {exc.strerror or exc}") from None
        for line in left_out:
            print(f"envkit: the plot leaves out {line}", file=sys.stderr)
        print(f"envkit: wrote {plot}", file=sys.stderr)
    if html is not None:
        from envkit.runs.figures import INSTALL_HINT, matplotlib_problem
        from envkit.runs.page_adapter import write_report_page
        from envkit.runs.page_records import git_remote

        size = write_report_page(report, warnings, html, git_remote(config.resolve().parent))
        print(f"envkit: wrote {html} ({size / 1e6:.2f} MB)", file=sys.stderr)
        if problem := matplotlib_problem():
            print(
                f"envkit: the page has its tables without figures: matplotlib {problem}; {INSTALL_HINT}",
                file=sys.stderr,
            )


def _check_html(html: Path) -> None:
    """Before anything prints: the page's name (without matplotlib the page is written without its figures)."""
    from envkit.errors import EnvkitError

    if html.suffix.lower() not in (".html", ".htm"):
        raise EnvkitError(f"--html {html}: the page is an HTML file, give a name ending in .html")
    if html.is_dir():
        raise EnvkitError(f"--html {html}: is a directory, give the page's file name (e.g. {html / 'report.html'})")
    existing = next(parent for parent in html.absolute().parents if parent.exists())
    if not existing.is_dir():
        raise EnvkitError(f"--html {html}: {existing} is not a directory, so the page cannot go there")


def _require_matplotlib() -> None:
    """Before anything runs or prints: a plot without matplotlib is one line naming the extra."""
    from envkit.runs.figures import require_matplotlib

    require_matplotlib()


def cmd_report(args: argparse.Namespace) -> int:
    print_report(
        args.results_dir, args.format, args.plot, args.reference, args.baseline, args.strict, args.config, args.html
    )
    return 0


def _host_facts(config: Path):
    from envkit.host.doctor import inspect_host, runnable_experiments

    facts = inspect_host()
    return facts, runnable_experiments(facts, config)


def _check_project(config: Path) -> None:
    from envkit.errors import EnvkitError

    if not config.is_file():
        raise EnvkitError(f"config file {config} not found: run from the project directory or pass --config FILE")


def _report_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The report options of `compare`, passed on to its final `envkit report` step."""
    passed = ("--format", args.format)
    if args.plot is not None:
        passed += ("--plot", str(args.plot))
    if args.html is not None:
        passed += ("--html", str(args.html))
    if args.reference:
        passed += ("--reference",)
    if args.baseline is not None:
        passed += ("--baseline", args.baseline)
    if args.strict:
        passed += ("--strict",)
    return passed


def cmd_compare(args: argparse.Namespace) -> int:
    from envkit.runs.plans import compare_plan
    from envkit.runs.run_steps import execute

    _check_project(args.config)
    if args.plot is not None and not args.dry_run:
        _require_matplotlib()
    if args.html is not None and not args.dry_run:
        _check_html(args.html)
    facts, runnable = _host_facts(args.config)
    plan = compare_plan(
        args.results_dir,
        epochs=args.epochs,
        dataset=args.dataset,
        max_steps=args.max_steps,
        config=args.config,
        facts=facts,
        runnable=runnable,
        report_args=_report_args(args),
    )
    return 0 if execute(plan, dry_run=args.dry_run) else 1


def cmd_demo(args: argparse.Namespace) -> int:
    from envkit.runs.plans import demo_plan
    from envkit.runs.run_steps import execute

    _check_project(args.config)
    if not args.dry_run:  # the demo ends with a plot
        _require_matplotlib()
    facts, _ = _host_facts(args.config)
    plan = demo_plan(
        args.results_dir, config=args.config, facts=facts, use_docker=not args.no_docker, base_image=args.base_image
    )
    return 0 if execute(plan, dry_run=args.dry_run) else 1

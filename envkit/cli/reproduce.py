"""`envkit reproduce SOURCE`: run a shared result again from its recorded revision, and say whether it held.

The runs go through `envkit experiment NAME --python PY` itself (its parser and handler: one code path), from the
project at the record's revision in a temporary git worktree, into a results folder of the reproduction's own.
The verdict (envkit.runs.reproduce) is printed and written beside the reproduced runs as reproduction.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envkit.cli.options import add_config, add_target, directory_option
from envkit.support.provenance_records import RESULTS_FOLDER

VERDICT_FILE = "reproduction.md"


def register(subparsers) -> None:
    reproduce = subparsers.add_parser(
        "reproduce",
        help="run a shared record, results folder or page again at its revision and say whether the numbers held",
        description="SOURCE is a results record (results/*.json), a results folder (each of its comparisons) or "
        "a page envkit report --html wrote. Each is run again from the project at the recorded git revision (a "
        "temporary git worktree of the clone --config is in, removed after), on this host with --python as "
        "envkit experiment runs it, into a results folder of its own. The verdict puts the original beside the "
        "reproduction: each metric against the experiment's tolerance (envkit.yaml: reproduce: {accuracy: 0.005}; "
        "else 1% of the original's mean), the wall time's ratio with its 95% interval, the environment's "
        "difference (envkit diff's), and one word per row: reproduced, differs or not comparable. Exit 0 when "
        "every row reproduced, 1 when one did not, 2 for input it cannot run again (a dirty or missing revision, "
        "a newer record).",
    )
    reproduce.add_argument(
        "source",
        metavar="SOURCE",
        help="a results record (.json), a results folder or a page (.html) of envkit report --html",
    )
    add_config(reproduce)
    add_target(reproduce, "run on another target of the same experiment (the verdict then expects a difference)")
    reproduce.add_argument(
        "--runs", type=_runs, default=None, help="runs of each comparison (default: as many as the original's)"
    )
    reproduce.add_argument(
        "--python",
        metavar="PYTHON",
        default=None,
        help="the interpreter the runs use (default: the record's where this host has it, else the one running envkit)",
    )
    reproduce.add_argument(
        "--results-dir",
        type=directory_option,
        default=None,
        help=f"where the reproduced runs and {VERDICT_FILE} go (default: ./{RESULTS_FOLDER}/reproduce-<source name>)",
    )
    reproduce.add_argument("--data-dir", type=directory_option, default=None, help="datasets (default: the program's)")
    reproduce.add_argument("--dry-run", action="store_true", help="print the plan (worktree, runs) and run nothing")
    reproduce.set_defaults(func=cmd_reproduce)


def _runs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of runs, 1 or more")
    return int(text)


def _results_dir(args: argparse.Namespace) -> Path:
    """The reproduction's own results folder: --results-dir, which must hold no record yet, else a new one."""
    from envkit.errors import EnvkitError

    if args.results_dir is not None:
        if args.results_dir.is_dir() and any(args.results_dir.glob("*.json")):
            raise EnvkitError(f"--results-dir {args.results_dir} holds records already; name a new or empty folder")
        return args.results_dir
    stem = Path(args.source).name.removesuffix(".json") or "source"
    base = Path(RESULTS_FOLDER) / f"reproduce-{stem}"
    taken = 1
    folder = base
    while folder.exists():
        taken += 1
        folder = base.with_name(f"{base.name}-{taken}")
    return folder


def _experiment_argv(case, config: Path, python: str, out: Path, args, recipe_args) -> list[str]:
    """`envkit experiment`'s command line for one run of the case."""
    argv = ["experiment", case.experiment, "--config", str(config), "--python", python, "--results-dir", str(out)]
    target = args.target or case.target
    argv += ["--target", target] if target else []
    argv += ["--data-dir", str(args.data_dir)] if args.data_dir is not None else []
    return [*argv, "--", *recipe_args]


def _run_case(case, root: Path, relative: Path, out: Path, args, steps: list[str]):
    """The case run again in a worktree at its revision: its new records and the experiment's tolerances."""
    from envkit.cli import build_parser, parse
    from envkit.errors import EnvkitError
    from envkit.project.experiments import experiment
    from envkit.runs.reproduce import recipe_arguments, recorded_python, worktree
    from envkit.support.shellquote import command_line

    python = args.python or recorded_python(case) or sys.executable
    runs = args.runs or len(case.runs)
    with worktree(root, case.revision) as tree:
        config = tree / relative
        entry = experiment(case.experiment, config)
        recipe_args = recipe_arguments(case, [run.argv for run in entry.runs])
        argv = _experiment_argv(case, config, python, out.resolve(), args, recipe_args)
        steps.append(
            f"{case.title}: the project at {case.revision[:12]} (git worktree), {runs} run(s) of "
            f"envkit {command_line({}, argv).replace(str(tree), '<worktree>')}"
        )
        if args.dry_run:
            return [], entry.reproduce
        before = set(out.glob("*.json"))
        for _ in range(runs):
            command = parse(build_parser("experiment"), argv)
            command.func(command)  # a failed run is a record too: the verdict says so
        from envkit.runs.reproduce import read_record

        new = sorted(set(out.glob("*.json")) - before)
        if not new:
            raise EnvkitError(f"{case.title}: the runs left no record in {out}")
        return [read_record(path) for path in new], entry.reproduce


def cmd_reproduce(args: argparse.Namespace) -> int:
    from envkit.runs.reproduce import (
        cases_of,
        exit_status,
        git_root,
        judge,
        read_source,
        refuse_unreproducible,
        verdict_markdown,
    )
    from envkit.support.atomic import write_text_atomic

    source = Path(args.source)
    runs, warnings = read_source(source)
    config = args.config.resolve()
    root = git_root(config.parent)
    relative = config.relative_to(root.resolve())
    cases = cases_of(runs)
    for case in cases:  # every case checked before anything runs
        refuse_unreproducible(case, root)
    for warning in warnings:
        print(f"envkit: warning: {warning}", file=sys.stderr)
    out = _results_dir(args)
    steps: list[str] = []
    outcomes = []
    if not args.dry_run:
        out.mkdir(parents=True, exist_ok=True)
    for case in cases:
        reproduced, tolerances = _run_case(case, root, relative, out, args, steps)
        outcomes.append((case, reproduced, tolerances))
    if args.dry_run:
        sys.stdout.write("".join(f"# {number}. {step}\n" for number, step in enumerate(steps, start=1)))
        return 0
    verdicts = [judge(case, reproduced, tolerances, args.target) for case, reproduced, tolerances in outcomes]
    text = verdict_markdown(verdicts, str(source), out, steps)
    write_text_atomic(out / VERDICT_FILE, text)
    sys.stdout.write(text)
    return exit_status(verdicts)

"""`envkit reproduce SOURCE`: run a shared result again from its recorded revision, and say whether it held.

The runs go through `envkit experiment NAME --python PY` itself (its parser and handler: one code path), from the
project at the record's revision in a temporary git worktree, into a results folder of the reproduction's own.
The verdict (envkit.runs.reproduce) is printed and written beside the reproduced runs as reproduction.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path

from envkit.cli.options import add_build_options, add_config, add_target, build_options_argv, directory_option
from envkit.support.provenance_records import RESULTS_FOLDER

VERDICT_FILE = "reproduction.md"
VERDICT_PAGE = "reproduction.html"  # the same verdict as a page: both sides' runs, as envkit report --html shows them


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
    reproduce.add_argument(
        "--data-dir",
        type=directory_option,
        default=None,
        help="datasets (default: data/ beside --config where it exists: the worktree holds only what git tracks)",
    )
    reproduce.add_argument(
        "--torch-index-url",
        metavar="URL",
        help="where a host venv of an image run's lock takes torch from: a mirror of the target's PyTorch index, "
        "as envkit venv takes it",
    )
    # A rebuild of an image run (no push of it to pull) is envkit build's: a collaborator offline or behind a proxy
    # builds it as they build their own images (--wheelhouse, --base-image, --ca-cert).
    add_build_options(reproduce)
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
    # a folder's name, or a record's or a page's without its suffix: results/reproduce-page, not reproduce-page.html
    stem = Path(args.source).name.removesuffix(".json").removesuffix(".html") or "source"
    base = Path(RESULTS_FOLDER) / f"reproduce-{stem}"
    taken = 1
    folder = base
    while folder.exists():
        taken += 1
        folder = base.with_name(f"{base.name}-{taken}")
    return folder


@dataclass
class _Reproduction:
    """One case being run again: where (the worktree), how (the command line's options), and what it said."""

    case: object  # envkit.runs.reproduce.Case
    tree: Path  # the project at the revision
    config: Path  # its envkit.yaml
    out: Path
    args: argparse.Namespace
    recipe_args: tuple[str, ...]
    steps: list[str]

    @property
    def target(self) -> str | None:
        return self.args.target or self.case.target

    @property
    def data_dir(self) -> Path | None:
        """--data-dir, else the clone's data/ beside --config (untracked, so not in the worktree), where it exists."""
        clones = self.args.config.resolve().parent / "data"
        return self.args.data_dir.resolve() if self.args.data_dir else clones if clones.is_dir() else None

    @property
    def runs(self) -> int:
        return self.args.runs or len(self.case.runs)

    def say(self, step: str) -> None:
        self.steps.append(f"{self.case.title}: {step.replace(str(self.tree), '<worktree>')}")

    def envkit(self, argv: list[str], times: int = 1) -> None:
        """An envkit command at the revision, through its own parser and handler (one code path with the CLI)."""
        from envkit.cli import build_parser, parse

        for _ in range(0 if self.args.dry_run else times):
            command = parse(build_parser(argv[0]), argv)
            command.hand_over = False  # the verdict comes after the runs: envkit experiment must not replace us
            with contextlib.redirect_stdout(sys.stderr):  # what it says is progress: stdout is the verdict's
                command.func(command)  # a failed run is a record too: the verdict says so

    def experiment_argv(self, python: str | None) -> list[str]:
        """`envkit experiment`'s command line for one run of the case: on this host with ``python``, else in the
        target's image."""
        argv = ["experiment", self.case.experiment, "--config", str(self.config), "--results-dir", str(self.out)]
        argv += ["--python", python] if python else list(build_options_argv(self.args))
        argv += ["--target", self.target] if self.target else []
        argv += ["--data-dir", str(self.data_dir)] if self.data_dir is not None else []
        return [*argv, "--", *self.recipe_args]


def _on_host(job: _Reproduction, python: str) -> None:
    from envkit.support.shellquote import command_line

    argv = job.experiment_argv(python)
    job.say(
        f"the project at {job.case.revision[:12]} (git worktree), {job.runs} run(s) of envkit {command_line({}, argv)}"
    )
    job.envkit(argv, job.runs)


def _engine():
    """A Docker client whose engine answers, else None."""
    from envkit.errors import EnvkitError
    from envkit.support.docker_client import connect_docker

    try:
        return connect_docker()
    except EnvkitError:
        return None


def _in_image(job: _Reproduction) -> None:
    """An image run: the image by digest, else a rebuild proved the same, else a host venv (reproduce_image)."""
    from envkit.errors import EnvkitError
    from envkit.project.load import load_config
    from envkit.runs.reproduce_image import PULL, REBUILD, choose

    if job.target is None:
        raise EnvkitError(f"{job.case.title}: the record names no target, so no image to run it in")
    engine = _engine()
    choice = choose(job.case.runs[0].environment, load_config(job.config), job.target, engine is not None)
    job.say(choice.said)
    if choice.how == PULL:
        return _pulled(job, engine, choice.reference)
    if choice.how == REBUILD:
        job.say(f"{job.runs} run(s) of envkit {' '.join(job.experiment_argv(None))} (its build cached after the first)")
        job.envkit(job.experiment_argv(None), job.runs)
        return None if job.args.dry_run else _prove(job, engine)
    venv = job.tree.parent / "venv"  # beside the worktree: removed with it
    job.say(f"envkit venv {job.target} --path <temporary venv>")
    mirror = ["--torch-index-url", job.args.torch_index_url] if job.args.torch_index_url else []
    job.envkit(["venv", job.target, "--config", str(job.config), "--path", str(venv), *mirror])
    return _on_host(job, str(venv / "bin" / "python"))


def _pulled(job: _Reproduction, engine, reference: str) -> None:
    """The image pulled by digest, then the experiment's run.sh steps with IMAGE set to it (no build)."""
    from envkit.errors import EnvkitError
    from envkit.host import doctor
    from envkit.project.experiments import experiment
    from envkit.project.load import load_config
    from envkit.project.placement import place
    from envkit.runs.plans import RunPlan, experiment_gpus, experiment_plan, format_plan
    from envkit.runs.run_steps import run_in_order
    from envkit.support.docker_client import docker_sdk

    config = load_config(job.config)
    entry, target = place(config, experiment(job.case.experiment, job.config), job.target)
    plan = experiment_plan(
        entry, target, config=job.config, output=config.output, gpus=None, results_dir=job.out,
        data_dir=job.data_dir, recipe_args=job.recipe_args,
    )  # fmt: skip
    steps = [step._replace(env={**step.env, "IMAGE": reference}) for step in plan.steps[2:]]
    job.say(f"docker pull {reference}, then {job.runs} time(s):\n{format_plan(RunPlan(steps))}".rstrip())
    if job.args.dry_run:
        return
    doctor.require(doctor.inspect_host(), entry.kind, experiment_gpus(entry, None, target.gpus))
    try:
        engine.images.pull(reference)
    except docker_sdk().errors.DockerException as exc:
        reason = (str(exc).strip().splitlines() or ["no reason given"])[0]
        raise EnvkitError(f"cannot pull {reference}: its registry did not answer ({reason})") from None
    for _ in range(job.runs):
        run_in_order(RunPlan(steps))


def _prove(job: _Reproduction, engine) -> None:
    """Whether the rebuilt image holds what the record lists (verify's rule on a record's facts), said; the
    verdict's environment difference, from the reproduced runs' own records, names it too."""
    from envkit.image.build import LATEST, repository
    from envkit.image.inventory import from_engine_image
    from envkit.runs.reproduce_image import proof

    reference = f"{repository(job.target)}:{LATEST}"
    differences = proof(from_engine_image(engine, reference), job.case.runs[0].environment)
    held = "; ".join(differences) or "none: it holds the record's Python packages"
    job.say(f"the rebuilt {reference}'s differences from the record: {held}")


def _run_case(case, root: Path, relative: Path, out: Path, args, steps: list[str]):
    """The case run again in a worktree at its revision: its new records and the experiment's tolerances."""
    from envkit.errors import EnvkitError
    from envkit.project.experiments import experiment
    from envkit.runs.reproduce import read_record, recipe_arguments, recorded_python, same_work, worktree

    with worktree(root, case.revision) as tree:
        config = tree / relative
        entry = experiment(case.experiment, config)
        recipe_args = recipe_arguments(case, [run.argv for run in entry.runs])
        job = _Reproduction(case, tree, config, out.resolve(), args, recipe_args, steps)
        before = set(out.glob("*.json"))
        if case.image is None or args.python:  # an image run with --python: on this host, as asked
            _on_host(job, args.python or recorded_python(case) or sys.executable)
        else:
            _in_image(job)
        if args.dry_run:
            return [], entry.reproduce
        new = sorted(set(out.glob("*.json")) - before)
        if not new:
            raise EnvkitError(f"{case.title}: the runs left no record in {out}")
        return same_work(case, [read_record(path) for path in new]), entry.reproduce


def cmd_reproduce(args: argparse.Namespace) -> int:
    from envkit.runs.reproduce import (
        cases_of,
        exit_status,
        git_root,
        judge,
        read_source,
        refuse_unreproducible,
        verdict_markdown,
        verdict_page,
    )
    from envkit.support.atomic import write_text_atomic

    source = Path(args.source)
    runs, warnings, remote = read_source(source)
    config = args.config.resolve()
    root = git_root(config.parent)
    relative = config.relative_to(root.resolve())
    cases = cases_of(runs)
    for case in cases:  # every case checked before anything runs
        refuse_unreproducible(case, root, remote)
    for warning in warnings:
        print(f"envkit: warning: {warning}", file=sys.stderr)
    out = _results_dir(args)
    steps: list[str] = []
    outcomes = []
    made = not args.dry_run and not out.exists()
    if made:
        out.mkdir(parents=True)
    try:
        for case in cases:
            reproduced, tolerances = _run_case(case, root, relative, out, args, steps)
            outcomes.append((case, reproduced, tolerances))
    except BaseException:
        if made and not any(out.iterdir()):  # refused before any run: nothing of it stays
            out.rmdir()
        raise
    if args.dry_run:
        sys.stdout.write("".join(f"# {number}. {step}\n" for number, step in enumerate(steps, start=1)))
        return 0
    verdicts = [judge(case, reproduced, tolerances, args.target) for case, reproduced, tolerances in outcomes]
    text = verdict_markdown(verdicts, str(source), out, steps)
    write_text_atomic(out / VERDICT_FILE, text)
    verdict_page(verdicts, out / VERDICT_PAGE, args.config)
    sys.stdout.write(text)
    return exit_status(verdicts)

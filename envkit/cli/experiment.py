"""`envkit experiment NAME [RECIPE ARGS...]`: one experiment of the project (envkit.yaml's experiments).

The one mechanism behind `make tpu-mnist`, `make gpu-dp-cifar GPUS=0,1` and `envkit
compare`: check the host, build the image (cached), run the recipe through
docker/<target>/run.sh. Python never calls make.
"""

from __future__ import annotations

import argparse
import sys

from envkit.cli.options import (
    add_build_options,
    add_config,
    add_recipe_args,
    add_target,
    build_options_argv,
    directory_option,
)
from envkit.support.provenance_records import RESULTS_FOLDER


def register(subparsers) -> None:
    experiment = subparsers.add_parser(
        "experiment",
        help="check the host, build the image (cached) and run one experiment of the table",
        description="Run one experiment of the project (envkit.yaml's experiments; `envkit doctor` lists them): "
        "the host check, the cached build of its target's image, then the recipe through docker/<target>/run.sh. "
        "envkit's options may stand anywhere; the recipe's follow '--' and may add to the experiment's own arguments "
        "but not contradict them, e.g. envkit experiment cpu-mnist --dry-run -- --epochs 1. "
        "run.sh reads NNODES, NODE_RANK, RDZV_ENDPOINT, RDZV_ID, "
        "NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME from the environment.",
    )
    experiment.add_argument("name", metavar="NAME", nargs="?", help="experiment name, e.g. cpu-mnist")
    experiment.add_argument(
        "--list", action="store_true", help="print the project's experiment names, one a line (what envkit.mk reads)"
    )
    add_recipe_args(experiment)
    add_config(experiment)
    add_target(
        experiment,
        "the config's target to run on, one of the experiment's targets (default: its first image target; "
        "a seed experiment naming a kind: the target named after it, or the kind's only one); with --python, "
        "the target whose device the run is told",
    )
    experiment.add_argument(
        "--gpus", help="host GPU indices or 'all' (the experiment's GPU rule picks the first or all)"
    )
    experiment.add_argument(
        "--results-dir",
        type=directory_option,
        default=None,
        help=f"where results go (default: run.sh's ./{RESULTS_FOLDER})",
    )
    experiment.add_argument(
        "--data-dir", type=directory_option, default=None, help="datasets (default: run.sh's ./data)"
    )
    add_build_options(experiment)
    experiment.add_argument(
        "--python",
        metavar="PYTHON",
        help="run the recipe with this interpreter on this host instead of "
        "in the target's image (no build; a GPU or TPU experiment still needs its device here, or --allow-cpu), "
        "e.g. E3 on XLA:CPU: PJRT_DEVICE=CPU "
        "CPU_NUM_DEVICES=8 envkit experiment e3-batch-scaling --python .venv-xla/bin/python",
    )
    experiment.add_argument(
        "--allow-cpu",
        action="store_true",
        help="with --python: run a GPU or TPU experiment on a host without that device, on the CPU as a "
        "stand-in (its record says CPU); without it such a run is refused before it starts",
    )
    experiment.add_argument(
        "--dry-run", action="store_true", help="print the commands (host check, build, run) instead of running them"
    )
    # hand_over: the last run may replace envkit's process (below); a command that runs experiment's handler and
    # has more to do after it (envkit reproduce, its verdict) sets it False.
    experiment.set_defaults(func=cmd_experiment, hand_over=True)


def cmd_experiment(args: argparse.Namespace) -> int:
    from envkit.errors import EnvkitError
    from envkit.project.experiments import experiment
    from envkit.project.load import load_config

    if args.list or args.name is None:
        return _list(args)
    entry = experiment(args.name, args.config)
    if args.python is not None:
        return _run_here(_placed_here(load_config(args.config), entry, args.target), args)
    # Imported here, not above: a run on this host (--python) needs neither the host checks nor the image plans.
    from envkit.host.doctor import parse_gpus
    from envkit.project.experiments import check_recipe_args
    from envkit.project.placement import place
    from envkit.runs.plans import experiment_gpus, experiment_plan, format_plan
    from envkit.runs.run_steps import run_in_order

    if args.allow_cpu:
        raise EnvkitError(
            "--allow-cpu goes with --python (a run on this host's interpreter); an image runs only where its device is"
        )
    config = load_config(args.config)
    entry, target = place(config, entry, args.target)
    if args.gpus is not None:
        parse_gpus(args.gpus)  # bad input on any host, before anything runs
        if entry.gpus == "none":
            raise EnvkitError(
                f"--gpus {args.gpus}: {entry.name} runs without GPUs ({entry.kind} experiments take none); "
                f"drop --gpus (GPUS= for make)"
            )
    check_recipe_args(entry, args.recipe_args, args.config)
    if entry.recipe is None:  # the image holds the project's files: a script not committed is not in it
        from envkit.project.files import files_of

        files_of(config, quiet=True).require_program(entry.program)
    plan = experiment_plan(
        entry,
        target,
        config=args.config,
        output=config.output,
        gpus=args.gpus,
        results_dir=args.results_dir,
        data_dir=args.data_dir,
        build_args=build_options_argv(args),
        recipe_args=tuple(args.recipe_args),
    )
    if args.dry_run:
        sys.stdout.write(format_plan(plan))
        return 0
    # The plan's first step, the host check, runs here: a host that cannot run the experiment is
    # one line (exit 2), not a child's line framed by progress lines.
    from envkit.host import doctor

    doctor.require(doctor.inspect_host(), entry.kind, experiment_gpus(entry, args.gpus, target.gpus))
    return run_in_order(plan._replace(steps=plan.steps[1:]))


def _list(args: argparse.Namespace) -> int:
    from envkit.errors import EnvkitError
    from envkit.project.experiments import load_experiments

    if not args.list:
        raise EnvkitError("name an experiment (envkit experiment --list prints them)")
    if args.name is not None or args.recipe_args:
        raise EnvkitError("--list takes no experiment name or recipe arguments")
    sys.stdout.write("".join(f"{name}\n" for name in load_experiments(args.config)))
    return 0


def _placed_here(config, entry, name: str | None):
    """The experiment as it runs as target ``name`` (its device, its GPU rule), or as its default target, so its
    record names the target as an image run's does. A run here needs no image: where no single default target
    fits (a seed experiment whose kind has several targets, or none), it runs as its kind, naming no target."""
    from envkit.errors import EnvkitError
    from envkit.project.placement import place

    if name is not None:
        return place(config, entry, name)[0]
    try:
        return place(config, entry, None)[0]
    except EnvkitError:
        return entry


def _run_here(entry, args: argparse.Namespace) -> int:
    """--python: the experiment's runs with that interpreter on this host, in order; no host check, no build."""
    from envkit.errors import EnvkitError
    from envkit.project.experiments import check_recipe_args
    from envkit.runs.plans import format_plan, local_experiment_plan
    from envkit.runs.run_steps import run_in_order

    image_only = [
        option
        for option, given in (
            ("--gpus", args.gpus),
            ("build options", build_options_argv(args)),
        )
        if given
    ]
    if image_only:
        raise EnvkitError(
            f"--python runs {entry.name} here, without an image: leave out {' and '.join(image_only)} "
            "(image runs only; recipe arguments such as --gpus go after '--')"
        )
    check_recipe_args(entry, args.recipe_args, args.config)
    from envkit.host.accelerator import missing_device, require_accelerator

    if args.dry_run:  # the plan whether or not the interpreter is there yet (make DRY_RUN=1), as it would run here
        stand_in = args.allow_cpu and missing_device(entry.kind) is not None
    else:
        from envkit.host.interpreter import check_interpreter

        check_interpreter(args.python)
        stand_in = require_accelerator(entry.name, entry.kind, args.allow_cpu)
    plan = local_experiment_plan(
        entry,
        args.python,
        root=args.config.resolve().parent,
        results_dir=args.results_dir,
        data_dir=args.data_dir,
        recipe_args=tuple(args.recipe_args),
        cpu_stand_in=stand_in,
    )
    if args.dry_run:
        sys.stdout.write(format_plan(plan))
        return 0
    from envkit.cli import is_the_program

    # In envkit's own process, its last run replaces it: a program or a test calling main keeps its process.
    return run_in_order(plan, hand_over=args.hand_over and is_the_program())

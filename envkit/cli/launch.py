"""`envkit launch`: run an experiment on several hosts through an existing engine.

Builds one job description from the experiments table and the config's target
for the experiment's kind, renders it for the engine chosen with --on, then
prints it (--dry-run) or submits it with the engine's own client.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envkit.cli.options import add_config, add_recipe_args, add_target, directory_option
from envkit.errors import EnvkitError
from envkit.support.provenance_records import RESULTS_FOLDER


def register(subparsers) -> None:
    from envkit.launch import engines
    from envkit.launch.job import DEFAULT_RDZV_PORT

    names = tuple(engines.REGISTRY)
    launch = subparsers.add_parser(
        "launch",
        help="run an experiment on N hosts via Slurm, Kubernetes, TPU pods, SkyPilot or plain hosts, or as a "
        "Kaggle notebook",
        description="Render EXPERIMENT for an engine and submit it with the engine's own client (sbatch, kubectl, "
        "gcloud, sky), or print exactly that with --dry-run. Recipe arguments follow '--' (the experiment's own "
        "come from the table), e.g. "
        "envkit launch gpu-ddp-cifar --on slurm --nodes 2 --gpus-per-node 4 -- --epochs 1",
    )
    launch.add_argument(
        "experiment", help="an experiment of the project (envkit.yaml's experiments), e.g. gpu-ddp-cifar"
    )
    add_recipe_args(launch)
    launch.add_argument(
        "--on",
        required=True,
        choices=names,
        metavar="ENGINE",
        help="the engine: one of the groups of options below (--on NAME), whose options it alone takes",
    )
    launch.add_argument("--nodes", type=int, default=1, help="hosts (default 1)")
    launch.add_argument(
        "--gpus-per-node",
        type=int,
        help="GPUs per host, and torchrun's processes per host (default: for an experiment on every GPU, those its "
        "target names (gpus: 0,2), else its devices; 1 for an experiment on the first GPU; else 0)",
    )
    launch.add_argument("--nproc-per-node", type=int, help="CPU torchrun experiments: processes per host (default 1)")
    launch.add_argument("--name", help="job name (default: the experiment's); DNS-1123 for Kubernetes")
    launch.add_argument(
        "--dry-run", action="store_true", help="print what would be submitted; write and submit nothing"
    )
    launch.add_argument(
        "--output",
        type=Path,
        help="directory for the script or manifest (default: jobs/; "
        "with --dry-run, write them there without submitting)",
    )
    add_config(launch)
    _add_image_options(launch)
    launch.add_argument(
        "--rdzv-port", type=int, default=DEFAULT_RDZV_PORT, help=f"rendezvous port (default {DEFAULT_RDZV_PORT})"
    )
    launch.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the program on every node, repeatable (e.g. GLOO_SOCKET_IFNAME=eth0), "
        "after the experiment's env: (it wins over one of the same name): exported by the sbatch script, set on "
        "the container (Kubernetes), in the task's envs (skypilot), in an --env-file copied to the workers "
        "(tpu-pod); run.sh (slurm --container docker) passes it into the container by name (ENVKIT_ENV), never in "
        "the run's argv; --on hosts prints its name only, for each host to export; --on kaggle refuses it (the "
        "notebook runs as rendered)",
    )
    launch.add_argument(
        "--stop",
        action="store_true",
        help="stop the experiment's running job instead of submitting it (an engine that cannot says so)",
    )
    _add_engine_options(launch, engines.REGISTRY)
    launch.set_defaults(func=cmd_launch)


def _add_engine_options(launch, registry) -> None:
    """Each engine's options (envkit.launch.spec.Option, declared in its module) as a group of flags, "--on NAME":
    given only where given (build refuses another engine's), shown in the first group of the engines that share
    one declaration; a flag of launch's own is refused (the registry refuses two engines' of one name)."""
    added: set[str] = set()
    for engine in registry.values():
        shared = [option.flag for option in engine.options if option.name in added]
        group = launch.add_argument_group(f"--on {engine.name}", f"also {', '.join(shared)}" if shared else None)
        for option in engine.options:
            if option.name in added:
                continue
            try:
                _add_option(group, option)
            except argparse.ArgumentError:
                raise EnvkitError(
                    f"launch engine {engine.name} declares {option.flag}, an option of every engine: rename it"
                ) from None
            added.add(option.name)


def _add_image_options(launch) -> None:
    """Which target and image run, and the host's folders."""
    add_target(
        launch, "the config's target to run on, one of the experiment's targets (default: its first image target)"
    )
    launch.add_argument(
        "--image",
        help="image reference, run as given (default: REGISTRY/envkit-<target>@<digest envkit push "
        "recorded>, or envkit-<target>:TAG without --registry)",
    )
    launch.add_argument(
        "--registry",
        help="registry the image was pushed to (envkit push), HOST[:PORT][/PATH]: every node "
        "runs the digest recorded in docker/<target>/pushed.json",
    )
    launch.add_argument("--tag", default="latest", help="image tag whose pushed digest runs (default: latest)")
    launch.add_argument(
        "--results-dir",
        type=directory_option,
        default=Path(RESULTS_FOLDER),
        help="host results directory (hosts, slurm)",
    )
    launch.add_argument(
        "--data-dir", type=directory_option, default=Path("data"), help="host data directory (hosts, slurm)"
    )


def _add_option(group, option) -> None:
    # No default in the namespace: the engine's settings fill it in, and a given one is known as given.
    if option.switch:
        group.add_argument(
            option.flag, dest=option.name, action="store_true", default=argparse.SUPPRESS, help=option.help
        )
        return
    kwargs = {"type": option.type} if option.type else {}
    group.add_argument(
        option.flag,
        dest=option.name,
        default=argparse.SUPPRESS,
        choices=option.choices,
        metavar=option.metavar,
        help=option.help,
        **kwargs,
    )


def build(args):
    """The job and its plan from the parsed arguments (bad input: EnvkitError)."""
    from envkit.launch import engines, images
    from envkit.project.experiments import experiment as find_experiment
    from envkit.project.load import load_config

    engine = engines.engine(args.on)
    options = engines.given_options(args.on, vars(args))
    config = load_config(args.config)
    experiment, target = engine.place(config, find_experiment(args.experiment, args.config), args.target)
    image = images.LaunchImage("")  # a notebook engine runs no image
    if engine.runs_image:
        image = images.choose(
            config.output.image_folder(config.root, target.name),
            target.name,
            tag=args.tag,
            image=args.image,
            registry=args.registry,
            tarball=options.get(images.TARBALL.name),
        )
    job = engines.build_job(
        args.on,
        experiment,
        target,
        nodes=args.nodes,
        root=config.root,
        data_dir=args.data_dir.resolve(),
        results_dir=args.results_dir.resolve(),
        image=image.reference,
        image_id=image.image_id,
        gpus_per_node=args.gpus_per_node,
        nproc_per_node=args.nproc_per_node,
        name=args.name,
        extra_args=tuple(args.recipe_args),
        rdzv_port=args.rdzv_port,
        env=tuple(args.env),
        options=options,
        config=args.config,
        images=config.output.images,
    )
    return job, engines.render_job(args.on, job, args.output or Path("jobs"))


def cmd_launch(args) -> int:
    from envkit.launch import engines
    from envkit.launch import plan as plans
    from envkit.launch.shell import line

    if args.stop and engines.engine(args.on).stop is None:
        stoppable = ", ".join(name for name, engine in engines.REGISTRY.items() if engine.stop)
        raise EnvkitError(f"--stop applies to --on {stoppable}; stop a {args.on} job with the engine's own client")
    if not 1 <= args.rdzv_port <= 65535:
        raise EnvkitError(f"--rdzv-port {args.rdzv_port} is not a port; give 1-65535")
    job, plan = build(args)
    if not plan.files and args.output is not None:
        raise EnvkitError(
            f"--output: --on {args.on} writes no files, it prints the command each host runs; drop --output "
            f"(redirect the printed commands to keep them)"
        )
    if args.stop:
        stop = engines.engine(args.on).stop(job)
        if args.dry_run:
            print(line(*stop))
        else:
            plans.run_client(stop)
        return 0
    if args.dry_run:
        if args.output:
            plans.write_files(plan)
        sys.stdout.write(plans.describe(plan))
        return 0
    if not plan.commands:
        # Plain hosts: no engine to hand the job to.
        sys.stdout.write(plans.describe(plan))
        return 0
    plans.submit(plan)
    print(f"envkit: submitted {job.experiment} as {job.name!r} to {args.on}; results: {plan.results}", file=sys.stderr)
    return 0

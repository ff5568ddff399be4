"""`envkit launch`: run an experiment on several hosts through an existing engine.

Builds one job description from the experiments table and the config's target
for the experiment's kind, renders it for the engine chosen with --on, then
prints it (--dry-run) or submits it with the engine's own client.
"""

from __future__ import annotations

import sys
from pathlib import Path

from envkit.cli.options import add_config, add_recipe_args, add_target, directory_option
from envkit.errors import EnvkitError


def _names(text: str) -> tuple[str, ...]:
    return tuple(name for name in text.split(",") if name)


def _absolute(text: str) -> str:
    return str(Path(text).resolve())


def register(subparsers) -> None:
    from envkit.launch.job import DEFAULT_RDZV_PORT, ENGINES, NOTEBOOK_ENGINES, SLURM_CONTAINERS

    launch = subparsers.add_parser(
        "launch",
        help="run an experiment on N hosts via Slurm, Kubernetes, TPU pods, SkyPilot or plain hosts, or as a Kaggle notebook",
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
        choices=ENGINES + NOTEBOOK_ENGINES,
        metavar="ENGINE",
        help=f"one of: {', '.join(ENGINES + NOTEBOOK_ENGINES)}",
    )
    launch.add_argument("--nodes", type=int, default=1, help="hosts (default 1)")
    launch.add_argument("--gpus-per-node", type=int, help="GPUs per host (default: 1 for GPU experiments, else 0)")
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
        "--results-dir", type=directory_option, default=Path("results"), help="host results directory (hosts, slurm)"
    )
    launch.add_argument(
        "--data-dir", type=directory_option, default=Path("data"), help="host data directory (hosts, slurm)"
    )
    launch.add_argument(
        "--rdzv-port", type=int, default=DEFAULT_RDZV_PORT, help=f"rendezvous port (default {DEFAULT_RDZV_PORT})"
    )
    launch.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the job on every node, repeatable (e.g. GLOO_SOCKET_IFNAME=eth0): "
        "exported by the sbatch script, set on the container (Kubernetes, tpu-pod), in the task's envs "
        "(skypilot); hosts and slurm --container docker give it to run.sh, which passes the multi-node "
        "ones (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) into the container",
    )
    # Each engine setting's dest is a field of EngineOptions, which takes them by name (engine_options):
    # a new setting is one line here and one field there.
    engine = launch.add_argument_group("engine settings")
    engine.add_argument(
        "--hosts", type=_names, default=(), help="hosts: comma-separated host names, the rendezvous host first"
    )
    engine.add_argument(
        "--container",
        default=SLURM_CONTAINERS[0],
        choices=SLURM_CONTAINERS,
        help="slurm: podman (the image, pulled by digest with --registry or loaded from --image-tarball; "
        "the default), docker (run.sh), pyxis, apptainer, or host (the Python environment sbatch runs in)",
    )
    engine.add_argument("--partition", help="slurm: partition")
    engine.add_argument("--time", help="slurm: time limit, e.g. 02:00:00")
    engine.add_argument(
        "--image-tarball",
        type=_absolute,
        help="slurm podman/apptainer, tpu-pod: envkit save's .tar.gz (its .manifest.json beside it names the image)",
    )
    engine.add_argument(
        "--volume-claim",
        default="envkit",
        help="pytorchjob, jobset: PersistentVolumeClaim holding data/ and results/ (default envkit)",
    )
    engine.add_argument("--tpu-accelerator", help="jobset on TPU: GKE accelerator, e.g. tpu-v5-lite-podslice")
    engine.add_argument("--tpu-topology", help="jobset on TPU: slice topology, e.g. 4x4")
    engine.add_argument("--tpu-chips-per-node", type=int, default=4, help="jobset on TPU: chips per host (default 4)")
    engine.add_argument("--tpu", help="tpu-pod: the TPU VM's name")
    engine.add_argument("--zone", help="tpu-pod: the TPU VM's zone")
    engine.add_argument("--stop", action="store_true", help="tpu-pod: stop the experiment's container on every worker")
    engine.add_argument("--accelerators", help="skypilot: e.g. A100:8 or tpu-v5e-16 (default A100:<gpus-per-node>)")
    # Kaggle runs the experiment's notebook, not an image: its settings are no EngineOptions.
    kaggle = launch.add_argument_group("kaggle settings")
    kaggle.add_argument(
        "--kaggle-user",
        help="kaggle: the account the notebook goes to (default: KAGGLE_USERNAME, "
        "or kaggle.json's username); --name sets its slug (default envkit-EXPERIMENT), --target the "
        "Kaggle notebook target",
    )
    kaggle.add_argument(
        "--poll",
        type=int,
        default=60,
        metavar="SECONDS",
        help="kaggle: seconds between `kaggle kernels status` checks (default 60)",
    )
    kaggle.add_argument(
        "--wait",
        type=int,
        default=12 * 3600,
        metavar="SECONDS",
        help="kaggle: give up waiting after this long; the run goes on (default 43200)",
    )
    launch.set_defaults(func=cmd_launch)


def build(args):
    """The job and its plan from the parsed arguments (bad input: EnvkitError)."""
    from envkit.launch import images
    from envkit.launch.engines import render_job
    from envkit.launch.job import build_job, engine_options
    from envkit.project.config import load_config
    from envkit.project.experiments import experiment as find_experiment
    from envkit.project.placement import place

    config = load_config(args.config)
    experiment, target = place(config, find_experiment(args.experiment, args.config), args.target)
    tarball = Path(args.image_tarball) if args.image_tarball else None
    image = images.choose(
        config.root, target.name, tag=args.tag, image=args.image, registry=args.registry, tarball=tarball
    )
    job = build_job(
        experiment,
        target,
        engine=args.on,
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
        options=engine_options(vars(args)),
        config=args.config,
    )
    return job, render_job(args.on, job, args.output or Path("jobs"))


def cmd_launch(args) -> int:
    from envkit.launch import plan as plans
    from envkit.launch import tpu_pod
    from envkit.launch.shell import line

    if args.on == "kaggle":
        return _launch_kaggle(args)
    if args.stop and args.on != "tpu-pod":
        raise EnvkitError(f"--stop applies to --on tpu-pod; stop a {args.on} job with the engine's own client")
    if not 1 <= args.rdzv_port <= 65535:
        raise EnvkitError(f"--rdzv-port {args.rdzv_port} is not a port; give 1-65535")
    job, plan = build(args)
    if not plan.files and args.output is not None:
        raise EnvkitError(
            f"--output: --on {args.on} writes no files, it prints the command each host runs; drop --output "
            f"(redirect the printed commands to keep them)"
        )
    if args.stop:
        stop = tpu_pod.stop_command(job)
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


def _launch_kaggle(args) -> int:
    """Kaggle runs a notebook, not an image: envkit notebook's, pushed with the kaggle CLI."""
    from envkit.launch import kaggle
    from envkit.project.config import load_config

    if args.nodes != 1 or args.recipe_args or args.stop:
        raise EnvkitError(
            "--on kaggle runs the experiment's notebook as rendered: one node, no recipe arguments "
            "after '--', no --stop (stop it on kaggle.com)"
        )
    if args.poll < 1 or args.wait < 1:
        raise EnvkitError("--poll and --wait take a positive number of seconds")
    config = load_config(args.config)
    run = kaggle.prepare(
        config, args.experiment, args.target, args.kaggle_user, args.name, args.output or Path("jobs"), args.results_dir
    )
    if args.dry_run:
        if args.output:
            kaggle.write(run)
        sys.stdout.write(kaggle.describe(run, args.poll))
        return 0
    kaggle.submit(run, args.poll, args.wait)
    return 0

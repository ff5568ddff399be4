"""Slurm: one sbatch script per experiment, one torchrun per node (srun), no accounting.

The rendezvous is the allocation's first host. Five ways to reach the software,
for the container runtimes clusters actually have (--container):
  podman     the image under podman (the default): daemonless, so the container
             srun starts is a child of the step, in the node's own network
             namespace (--network=host); pulled by digest from --registry, or
             loaded from envkit save's tarball, on each node
  docker     docker/<target>/run.sh on each node (the recipe starts torchrun)
  pyxis      srun --container-image (NVIDIA's Pyxis/enroot), pulled from a registry
  apptainer  apptainer exec on envkit save's tarball (docker-archive)
  host       the Python environment sbatch is called from (PATH is exported): no image
The image's identity reaches the recipe as ENVKIT_IMAGE / ENVKIT_IMAGE_ID
(run.sh sets them itself for docker). Nothing here reads sacct or slurmdbd:
sbatch's own exit status is the job's.
"""

from __future__ import annotations

import re
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.launch import images, run_sh
from envkit.launch import job as jobs
from envkit.launch.plan import MARK, LaunchPlan
from envkit.launch.shell import Raw, line
from envkit.launch.spec import Engine, Option
from envkit.support import provenance

# The first is the default: the image, through the daemonless runtime a user may run on a cluster.
CONTAINERS = ("podman", "docker", "pyxis", "apptainer", "host")
_SBATCH_VALUE = {"partition": re.compile(r"^[A-Za-z0-9_.,-]+$"), "time": re.compile(r"^[0-9][0-9:-]*$")}

FIRST_HOST = 'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)'
# Per node: the GPUs Slurm gave this step, as run.sh's GPUS wants them (host indices).
STEP_GPUS = 'export GPUS=${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-all}}; exec "$0" "$@"'
# The same GPUs as podman's CDI devices (nvidia-ctk cdi generate names them nvidia.com/gpu=<index>|all),
# inserted after "podman run": bash -c STEP_DEVICES podman run ARGS... ({cdi}: the kind's cdi_device)
STEP_DEVICES = (
    'devices=(); for id in $(echo "${{SLURM_STEP_GPUS:-${{SLURM_JOB_GPUS:-all}}}}" | tr , " "); '
    'do devices+=(--device "{cdi}=$id"); done; exec "$0" "$1" "${{devices[@]}}" "${{@:2}}"'
)
# Run on every node before anything is written: podman there, the image there (pulled by its digest,
# or loaded from the tarball), and a container of it starts. Otherwise one line and exit 2, which
# srun and then the batch script (set -e) return. Arguments: IMAGE PULL_POLICY [TARBALL].
PODMAN_CHECK = """fail() { echo "envkit: $(hostname): $1" >&2; exit 2; }
command -v podman >/dev/null || fail "podman is not installed: install it, or choose another --container"
if [ -n "${2:-}" ] && ! podman image exists "$0"; then
  out=$(podman load --input "$2" 2>&1) || fail "podman cannot load $2: $(tail -n 1 <<<"$out")"
fi
out=$(podman run --rm --pull="$1" --network=none "$0" true 2>&1) || fail "podman cannot run $0: $(tail -n 1 <<<"$out")"
"""
# Rootless podman (a cluster user) maps the caller into the container only with keep-id; rootful podman refuses it.
PODMAN_USERNS = 'userns=(); [ "$(id -u)" = 0 ] || userns=(--userns=keep-id)'


def sbatch_script(job: jobs.Job) -> str:
    """The sbatch script: a pure function of the job, so tests can submit it as is."""
    options = job.options
    directives = [f"--job-name={job.name}", f"--nodes={job.nodes}", "--ntasks-per-node=1"]
    if job.gpus_per_node:
        directives.append(f"--gpus-per-node={job.gpus_per_node}")
    if options.partition:
        directives.append(f"--partition={options.partition}")
    if options.time:
        directives.append(f"--time={options.time}")
    body = {"podman": _podman, "host": _host, "docker": _docker, "pyxis": _pyxis, "apptainer": _apptainer}[
        options.container
    ](job)
    return "\n".join(
        [
            "#!/bin/bash",
            *(f"#SBATCH {directive}" for directive in directives),
            f"{MARK}experiment {job.experiment}, target {job.target}, container {options.container}.",
            "set -eu",
            "# c10d rendezvous on the allocation's first host; one torchrun per node. Before pipefail:",
            "# head closes the pipe early, and scontrol may die of SIGPIPE.",
            FIRST_HOST,
            ': "${head:?scontrol found no host in SLURM_JOB_NODELIST}"',
            "set -o pipefail",
            # docker's run.sh starts torchrun itself, from NNODES and RDZV_ENDPOINT (_docker)
            *(_rendezvous(job) if job.uses_torchrun and options.container != "docker" else []),
            *(_podman_check(job) if options.container == "podman" else []),
            # podman, unlike docker, refuses to bind-mount a directory that does not exist.
            line("mkdir", "-p", "--", job.results_dir, *([job.data_dir] if options.container == "podman" else [])),
            *_exports(job.written_env()),
            # an --env secret is in no file: sbatch exports the environment it is run in (envkit's plan.environment)
            *(f': "${{{name}:?set it where sbatch runs: envkit writes no --env secret}}"' for name in job.secret_env),
            *body,
            "",
        ]
    )


def _exports(env) -> list[str]:
    # srun hands the batch script's environment to every task; Pyxis and Apptainer pass it into the container.
    return [line("export", f"{key}={value}") for key, value in env]


def _rendezvous(job: jobs.Job) -> list[str]:
    """torchrun's rendezvous, chosen when the job runs (sbatch --nodes may change the directive): one node needs
    none across hosts, and on loopback a node whose own name does not resolve (no 127.0.1.1 line) still starts,
    where a c10d store at that name waits out two 300 s timeouts; several meet on the first host."""
    across = line(
        *("--nnodes", Raw('"$SLURM_NNODES"'), "--rdzv-backend", "c10d", "--rdzv-endpoint"),
        *(Raw(f'"$head":{job.rdzv_port}'), "--rdzv-id", Raw('"$SLURM_JOB_ID"')),
    )
    return [
        'if [ "$SLURM_NNODES" = 1 ]; then rendezvous=(--standalone --local-addr 127.0.0.1)',
        f"else rendezvous=({across}); fi",
    ]


def _torchrun(job: jobs.Job) -> list | None:
    if not job.uses_torchrun:
        return None
    return ["torchrun", Raw('"${rendezvous[@]}"'), "--nproc-per-node", str(job.processes_per_node)]


def _srun() -> list[str]:
    return ["srun", "--ntasks-per-node=1"]


def _host(job: jobs.Job) -> list[str]:
    # From the project's root, as in the image.
    start = job.wrapped(job.command(_torchrun(job)), f"{job.rendered}/{provenance.FILE_NAME}")
    return [*_exports(job.run_env(job.data_dir, job.results_dir)), line(*_srun(), f"--chdir={job.root}", *start)]


def _docker(job: jobs.Job) -> list[str]:
    env = run_sh.run_sh_env(job)
    env.pop("GPUS", None)  # per node, from the step's allocation (below)
    exports = _exports(env.items())
    exports.append(
        line(
            Raw("export"),
            Raw('NNODES="$SLURM_NNODES"'),
            Raw(f'RDZV_ENDPOINT="$head":{job.rdzv_port}'),
            Raw('RDZV_ID="$SLURM_JOB_ID"'),
        )
    )
    wrap = ["bash", "-c", STEP_GPUS] if job.asks_gpus else []
    argv = run_sh.run_sh_argv(job, Raw(f'"$head":{job.rdzv_port}'), Raw('"$SLURM_JOB_ID"'), Raw('"$SLURM_NNODES"'))
    return [*exports, line(*_srun(), *wrap, run_sh.run_sh(job), *argv)]


def _bind_pairs(job: jobs.Job) -> list[str]:
    pairs = ((job.data_dir, jobs.CONTAINER_DATA), (job.results_dir, jobs.CONTAINER_RESULTS))
    for host_path, _ in pairs:
        if "," in host_path or ":" in host_path:
            raise EnvkitError(
                f"{host_path!r}: a bind-mounted directory cannot contain ',' or ':'; "
                f"choose another --data-dir/--results-dir"
            )
    return [f"{host_path}:{inside}" for host_path, inside in pairs]


def _binds(job: jobs.Job) -> str:
    return ",".join(_bind_pairs(job))


def _pyxis(job: jobs.Job) -> list[str]:
    # enroot names a registry image REGISTRY#PATH:TAG, or REGISTRY#PATH@DIGEST in the enroot releases that take digests.
    registry, _, path = job.image.partition("/")
    image = f"{registry}#{path}"
    return [
        *_exports(job.container_env()),
        line(
            *_srun(),
            f"--container-image={image}",
            f"--container-mounts={_binds(job)}",
            f"--container-workdir={jobs.IMAGE_PROJECT}",
            *job.wrapped(job.command(_torchrun(job))),
        ),
    ]


def _apptainer(job: jobs.Job) -> list[str]:
    gpu = list(job.devices.get("apptainer_args", ())) if job.asks_gpus else []
    source = f"docker-archive://{job.options.image_tarball}"
    return [
        *_exports(job.container_env()),
        line(
            *_srun(),
            "apptainer",
            "exec",
            *gpu,
            "--bind",
            _binds(job),
            # apptainer starts in the caller's directory; the program runs from the project's root in the image.
            "--pwd",
            jobs.IMAGE_PROJECT,
            source,
            *job.wrapped(job.command(_torchrun(job))),
        ),
    ]


def _podman_source(job: jobs.Job) -> tuple[str, str]:
    """What podman runs, and its pull policy: the tarball's image by ID once loaded; a registry reference
    (by digest once pushed) pulled when missing; a bare local name never pulled, so that no short name
    is ever looked up in a registry the user did not name."""
    if job.options.image_tarball:
        return job.image_id or job.image, "never"
    return job.image, "missing" if "/" in job.image else "never"


def _podman_check(job: jobs.Job) -> list[str]:
    image, pull = _podman_source(job)
    tarball = [job.options.image_tarball] if job.options.image_tarball else []
    return [
        "# Every node: podman, the image, and a container of it start; else one line and exit 2, "
        "before anything is written.",
        line(*_srun(), "bash", "-c", PODMAN_CHECK, image, pull, *tarball),
    ]


def _podman(job: jobs.Job) -> list[str]:
    """podman run with the flags run.sh gives the kind's containers (envkit/data/kinds.yaml), the node's
    network and host name (c10d must find the node's name), the recipe's variables passed by name."""
    settings = job.kind_run
    image, _ = _podman_source(job)
    flags = ["--rm", "--pull=never", "--network=host", "--uts=host", *settings.docker_args]
    flags += ["--shm-size", settings.shm_size] if settings.shm_size else ["--ipc=host"]
    for name, limit in settings.ulimits.items():
        flags += ["--ulimit", f"{name}={limit}"]
    if settings.user == "caller":
        flags += [Raw('${userns[@]+"${userns[@]}"}'), "--user", Raw('"$(id -u):$(id -g)"'), "-e", "HOME=/tmp"]
    flags += [word for key, value in settings.env.items() for word in ("-e", f"{key}={value}")]
    flags += [word for key, _ in (*job.container_env(), *job.env) for word in ("-e", key)]
    # The run wrapper records the run on the first node alone, which it knows by srun's SLURM_NODEID
    # (envkit/support/provenance.py); podman passes only the variables it is given (pyxis and apptainer pass all).
    flags += ["-e", "SLURM_NODEID"]
    flags += [word for pair in _bind_pairs(job) for word in ("-v", pair)]
    cdi = job.devices.get("cdi_device")
    wrap = ["bash", "-c", STEP_DEVICES.format(cdi=cdi)] if cdi and job.asks_gpus else []
    return [
        *_exports(job.container_env()),
        PODMAN_USERNS,
        line(*_srun(), *wrap, "podman", "run", *flags, image, *job.wrapped(job.command(_torchrun(job)))),
    ]


def plan(job: jobs.Job, output: Path) -> LaunchPlan:
    script = str(output / f"{job.name}.sbatch")
    return LaunchPlan(
        files=((script, sbatch_script(job)),),
        commands=(("sbatch", script),),
        results=f"{job.results_dir} (a directory every node must see: a shared filesystem)",
        notes=(
            *(job.image_notes() if job.options.container == "podman" and not job.options.image_tarball else ()),
            "follow it with squeue and the job's slurm-<id>.out; cancel with scancel <id>",
        ),
    )


def check(job: jobs.Job) -> None:
    options = job.options
    if options.container not in CONTAINERS:
        raise EnvkitError(f"unknown --container {options.container!r}; choose from {', '.join(CONTAINERS)}")
    for key, pattern in _SBATCH_VALUE.items():
        value = getattr(options, key)
        if value is not None and not pattern.match(value):
            raise EnvkitError(f"--{key} {value!r} is not a valid Slurm {key}")
    if options.container == "apptainer" and not options.image_tarball:
        raise EnvkitError("--container apptainer runs envkit save's tarball: pass --image-tarball FILE.tar.gz")
    if options.container == "pyxis" and "/" not in job.image:
        raise EnvkitError(
            f"--container pyxis pulls the image on every node, and {job.image!r} names no registry: "
            f"pass --registry HOST[:PORT][/PATH] (after envkit push) or --image"
        )


ENGINE = Engine(
    name="slurm",
    accelerators=("none", "gpus"),
    options=(
        Option(
            "container",
            "slurm: podman (the image, pulled by digest with --registry or loaded from --image-tarball; "
            "the default), docker (run.sh), pyxis, apptainer, or host (the Python environment sbatch runs in)",
            default=CONTAINERS[0],
            choices=CONTAINERS,
        ),
        Option("partition", "slurm: partition"),
        Option("time", "slurm: time limit, e.g. 02:00:00"),
        images.TARBALL,
    ),
    plan=plan,
    check=check,
    reserved_env=("SLURM_",),
)

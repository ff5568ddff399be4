"""Slurm: one sbatch script per experiment, one torchrun per node (srun), no accounting.

The rendezvous is the allocation's first host. Four ways to reach the software,
for the container runtimes clusters actually have (--container):
  host       the Python environment sbatch is called from (PATH is exported)
  docker     docker/<target>/run.sh on each node (the recipe starts torchrun)
  pyxis      srun --container-image (NVIDIA's Pyxis/enroot), pulled from a registry
  apptainer  apptainer exec on envkit save's tarball (docker-archive)
Nothing here reads sacct or slurmdbd: sbatch's own exit status is the job's.
"""

from __future__ import annotations

from pathlib import Path

from envkit.errors import EnvkitError
from envkit.launch import hosts
from envkit.launch import job as jobs
from envkit.launch.plan import Plan
from envkit.launch.shell import Raw, line

FIRST_HOST = 'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)'
# Per node: the GPUs Slurm gave this step, as run.sh's GPUS wants them (host indices).
STEP_GPUS = 'export GPUS=${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-all}}; exec "$0" "$@"'


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
    body = {"host": _host, "docker": _docker, "pyxis": _pyxis, "apptainer": _apptainer}[options.container](job)
    return "\n".join([
        "#!/bin/bash",
        *(f"#SBATCH {directive}" for directive in directives),
        f"# Rendered by envkit launch: experiment {job.experiment}, target {job.target}, container {options.container}.",
        "set -eu",
        "# c10d rendezvous on the allocation's first host; one torchrun per node. Before pipefail:",
        "# head closes the pipe early, and scontrol may die of SIGPIPE.",
        FIRST_HOST,
        ': "${head:?scontrol found no host in SLURM_JOB_NODELIST}"',
        "set -o pipefail",
        line("mkdir", "-p", "--", job.results_dir),
        *_exports(job.env),
        *body,
        "",
    ])


def _exports(env) -> list[str]:
    # srun hands the batch script's environment to every task; Pyxis and Apptainer pass it into the container.
    return [line("export", f"{key}={value}") for key, value in env]


def _torchrun(job: jobs.Job) -> list[str]:
    if not job.uses_torchrun:
        return ["python"]
    return [
        "torchrun", "--nnodes", Raw('"$SLURM_NNODES"'), "--nproc-per-node", str(job.processes_per_node),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", Raw(f'"$head":{job.rdzv_port}'), "--rdzv-id", Raw('"$SLURM_JOB_ID"'),
    ]


def _srun() -> list[str]:
    return ["srun", "--ntasks-per-node=1"]


def _host(job: jobs.Job) -> list[str]:
    argv = job.recipe_argv(f"{job.root}/recipes", job.data_dir, job.results_dir)
    return [line(*_srun(), *_torchrun(job), *argv)]


def _docker(job: jobs.Job) -> list[str]:
    env = hosts.container_env(job)
    env.pop("GPUS", None)  # per node, from the step's allocation (below)
    exports = _exports(env.items())
    exports.append(line(Raw("export"), Raw('NNODES="$SLURM_NNODES"'), Raw(f'RDZV_ENDPOINT="$head":{job.rdzv_port}'),
                        Raw('RDZV_ID="$SLURM_JOB_ID"')))
    wrap = ["bash", "-c", STEP_GPUS] if job.kind == "cuda" else []
    return [*exports, line(*_srun(), *wrap, hosts.run_sh(job), job.recipe, *hosts.recipe_args(job))]


def _binds(job: jobs.Job) -> str:
    pairs = ((job.data_dir, jobs.CONTAINER_DATA), (job.results_dir, jobs.CONTAINER_RESULTS))
    for host_path, _ in pairs:
        if "," in host_path or ":" in host_path:
            raise EnvkitError(f"{host_path!r}: a bind-mounted directory cannot contain ',' or ':'; choose another --data-dir/--results-dir")
    return ",".join(f"{host_path}:{inside}" for host_path, inside in pairs)


def _pyxis(job: jobs.Job) -> list[str]:
    # enroot names a registry image REGISTRY#PATH:TAG.
    registry, _, path = job.image.partition("/")
    image = f"{registry}#{path}"
    return [
        line("export", f"ENVKIT_IMAGE={job.image}"),
        line(*_srun(), f"--container-image={image}", f"--container-mounts={_binds(job)}", "--container-workdir=/workspace",
             *_torchrun(job), *job.image_argv()),
    ]


def _apptainer(job: jobs.Job) -> list[str]:
    gpu = ["--nv"] if job.kind == "cuda" else []
    source = f"docker-archive://{job.options.image_tarball}"
    return [
        line("export", f"ENVKIT_IMAGE={job.image}"),
        line(*_srun(), "apptainer", "exec", *gpu, "--bind", _binds(job), source, *_torchrun(job), *job.image_argv()),
    ]


def plan(job: jobs.Job, output: Path) -> Plan:
    script = str(output / f"{job.name}.sbatch")
    return Plan(
        files=((script, sbatch_script(job)),),
        commands=(("sbatch", script),),
        results=f"{job.results_dir} (a directory every node must see: a shared filesystem)",
        notes=("follow it with squeue and the job's slurm-<id>.out; cancel with scancel <id>",),
    )

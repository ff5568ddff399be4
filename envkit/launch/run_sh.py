"""<output.images>/<target>/run.sh as a launch runs it on a host (plain hosts, Slurm's docker container): its path,
the variables it reads, and what it runs in the image."""

from __future__ import annotations

from envkit.launch import job as jobs

# What run.sh passes into the container of the caller's environment (templates/run.sh.j2: multi-node torchrun's
# interfaces); any other variable of the job reaches the program through env(1) in the container.
PASSED = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def run_sh(job: jobs.Job) -> str:
    return f"{job.rendered}/run.sh"


def run_sh_env(job: jobs.Job) -> dict[str, str]:
    """The variables run.sh reads for this job (the image, mounts, GPUs)."""
    env = {
        "IMAGE": job.image,
        "DATA_DIR": job.data_dir,
        "RESULTS_DIR": job.results_dir,
        "ENVKIT_EXPERIMENT": job.experiment,
    }
    if job.asks_gpus:
        env["GPUS"] = ",".join(str(index) for index in range(job.gpus_per_node))
    return env


def passed_env(job: jobs.Job) -> dict[str, str]:
    """The job's variables run.sh itself passes into the container (set in its environment)."""
    return {name: value for name, value in job.env if name in PASSED}


def run_sh_argv(job: jobs.Job, endpoint, rdzv_id, nnodes) -> list:
    """What run.sh runs in the image, from the project's root: the job's other variables (the experiment's env:,
    --env) set by env(1). A recipe starts torchrun itself from the variables run.sh passes (on the CPU it needs
    the process count); any other program of a torchrun job starts under torchrun with the rendezvous
    ``endpoint``, ``rdzv_id`` and ``nnodes``."""
    others = [f"{name}={value}" for name, value in job.env if name not in PASSED]
    return [*(["env", *others] if others else []), *_program(job, endpoint, rdzv_id, nnodes)]


def _program(job: jobs.Job, endpoint, rdzv_id, nnodes) -> list:
    if not job.uses_torchrun:
        return job.command()
    if job.recipe is not None:
        return [*job.command(), *(["--nproc", str(job.processes_per_node)] if job.gpus_per_node == 0 else [])]
    rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id]
    return job.command(["torchrun", "--nnodes", nnodes, "--nproc-per-node", str(job.processes_per_node), *rendezvous])

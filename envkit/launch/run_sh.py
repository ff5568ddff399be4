"""<output.images>/<target>/run.sh as a launch runs it on a host (plain hosts, Slurm's docker container): its path,
the variables it reads, and what it runs in the image."""

from __future__ import annotations

from envkit.launch import job as jobs

# What run.sh passes into the container of the caller's environment itself (templates/run.sh.j2: multi-node
# torchrun's interfaces); any other variable of the job it passes when ENVKIT_ENV names it.
PASSED = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def run_sh(job: jobs.Job) -> str:
    return f"{job.rendered}/run.sh"


def run_sh_env(job: jobs.Job) -> dict[str, str]:
    """The variables run.sh reads for this job (the image, mounts, GPUs, and ENVKIT_ENV: the names of the job's
    variables it passes into the container as they are set where it runs)."""
    env = {
        "IMAGE": job.image,
        "DATA_DIR": job.data_dir,
        "RESULTS_DIR": job.results_dir,
        "ENVKIT_EXPERIMENT": job.experiment,
    }
    if job.asks_gpus:
        env["GPUS"] = ",".join(str(index) for index in range(job.gpus_per_node))
    named = [name for name, _ in job.env if name not in PASSED]
    if named:
        env["ENVKIT_ENV"] = " ".join(named)
    return env


def run_sh_argv(job: jobs.Job, endpoint, rdzv_id, nnodes) -> list:
    """What run.sh runs in the image, from the project's root: the program alone, never the job's variables (the
    experiment's env:, --env), which run.sh passes by name (ENVKIT_ENV) from its own environment, so that no value
    is in the run's argv, which its record, the report and the page show. A recipe starts torchrun itself from the
    variables run.sh passes (on the CPU it needs the process count); any other program of a torchrun job starts
    under torchrun with the rendezvous ``endpoint``, ``rdzv_id`` and ``nnodes``."""
    if not job.uses_torchrun:
        return job.command()
    if job.recipe is not None:
        return [*job.command(), *(["--nproc", str(job.processes_per_node)] if job.gpus_per_node == 0 else [])]
    rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id]
    return job.command(["torchrun", "--nnodes", nnodes, "--nproc-per-node", str(job.processes_per_node), *rendezvous])

"""Plain hosts: the run.sh command each host runs, with the multi-node variables.

There is no engine to submit to, so envkit prints the commands and starts nothing
on other machines (it is not a scheduler). run.sh passes NNODES/RDZV_* into the
container and adds --net=host when NNODES > 1; a recipe starts torchrun itself, any
other program starts under torchrun here.
"""

from __future__ import annotations

import re
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.launch import job as jobs
from envkit.launch.plan import LaunchPlan
from envkit.launch.spec import Engine, Option

_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


def run_sh(job: jobs.Job) -> str:
    return f"{job.root}/docker/{job.target}/run.sh"


def run_sh_env(job: jobs.Job) -> dict[str, str]:
    """The variables run.sh reads for this job (the image, mounts, GPUs)."""
    env = {
        "IMAGE": job.image,
        "DATA_DIR": job.data_dir,
        "RESULTS_DIR": job.results_dir,
        "ENVKIT_EXPERIMENT": job.experiment,
    }
    if job.kind == "cuda":
        env["GPUS"] = ",".join(str(index) for index in range(job.gpus_per_node))
    return env


def run_sh_argv(job: jobs.Job, endpoint, rdzv_id, nnodes) -> list:
    """What run.sh runs in the image, from the project's root. A recipe starts torchrun itself from the
    variables run.sh passes (on the CPU it needs the process count); any other program of a torchrun job
    starts under torchrun with the rendezvous ``endpoint``, ``rdzv_id`` and ``nnodes``."""
    if not job.uses_torchrun:
        return job.command()
    if job.recipe is not None:
        return [*job.command(), *(["--nproc", str(job.processes_per_node)] if job.gpus_per_node == 0 else [])]
    rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id]
    return job.command(["torchrun", "--nnodes", nnodes, "--nproc-per-node", str(job.processes_per_node), *rendezvous])


def plan(job: jobs.Job, output: Path) -> LaunchPlan:
    hosts = job.options.hosts or ("localhost",)
    env = run_sh_env(job)
    endpoint = f"{hosts[0]}:{job.rdzv_port}"
    if job.nodes > 1:
        env.update(NNODES=str(job.nodes), RDZV_ENDPOINT=endpoint, RDZV_ID=job.rdzv_id)
    env.update(job.env)
    argv = run_sh_argv(job, endpoint, job.rdzv_id, str(job.nodes))
    command = ("env", *(f"{key}={value}" for key, value in env.items()), run_sh(job), *argv)
    where = [f"{host}{' (rendezvous host)' if rank == 0 and job.nodes > 1 else ''}" for rank, host in enumerate(hosts)]
    return LaunchPlan(
        files=(),
        commands=(),
        results=f"{job.results_dir} on the host that becomes rank 0 (with c10d, any of them)",
        notes=("envkit starts nothing on other machines: run each command on its host, in any order",),
        elsewhere=tuple((host, command) for host in where),
    )


def check(job: jobs.Job) -> None:
    hosts = job.options.hosts
    if job.nodes > 1 and len(hosts) != job.nodes:
        raise EnvkitError(
            f"--on hosts with --nodes {job.nodes} needs --hosts with {job.nodes} comma-separated host names "
            f"(the first holds the rendezvous), got {len(hosts)}"
        )
    for host in hosts:
        if not _HOST.match(host):
            raise EnvkitError(f"--hosts: {host!r} is not a host name (letters, digits, '.', '-')")


def _names(text: str) -> tuple[str, ...]:
    return tuple(name for name in text.split(",") if name)


ENGINE = Engine(
    name="hosts",
    kinds=("cpu", "cuda"),
    options=(Option("hosts", "hosts: comma-separated host names, the rendezvous host first", default=(), type=_names),),
    plan=plan,
    check=check,
)

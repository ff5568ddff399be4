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
from envkit.launch.run_sh import run_sh, run_sh_argv, run_sh_env
from envkit.launch.spec import Engine, Option

_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


def plan(job: jobs.Job, output: Path) -> LaunchPlan:
    hosts = job.options.hosts or ("localhost",)
    env = run_sh_env(job)
    endpoint = f"{hosts[0]}:{job.rdzv_port}"
    if job.nodes > 1:
        env.update(NNODES=str(job.nodes), RDZV_ENDPOINT=endpoint, RDZV_ID=job.rdzv_id)
    # The experiment's env: is envkit.yaml's (checked for secrets as it is loaded); a --env value is printed nowhere:
    # each host's environment gives it, and run.sh passes it by name.
    env.update((name, value) for name, value in job.env if name not in job.given_env)
    argv = run_sh_argv(job, endpoint, job.rdzv_id, str(job.nodes))
    command = ("env", *(f"{key}={value}" for key, value in env.items()), run_sh(job), *argv)
    where = [f"{host}{' (rendezvous host)' if rank == 0 and job.nodes > 1 else ''}" for rank, host in enumerate(hosts)]
    given = (f"export {' '.join(job.given_env)} on each host first: envkit prints no --env value",)
    return LaunchPlan(
        files=(),
        commands=(),
        results=f"{job.results_dir} on the host that becomes rank 0 (with c10d, any of them)",
        notes=("envkit starts nothing on other machines: run each command on its host, in any order",)
        + (given if job.given_env else ()),
        elsewhere=tuple((host, command) for host in where),
    )


def check(job: jobs.Job) -> None:
    hosts = job.options.hosts
    # One node per host: two hosts run with --nnodes 1 each would start two separate jobs, not one of two nodes.
    if (job.nodes > 1 or len(hosts) > 1) and len(hosts) != job.nodes:
        raise EnvkitError(
            f"--on hosts with --nodes {job.nodes} needs --hosts with {job.nodes} comma-separated host names "
            f"(the first holds the rendezvous), got {len(hosts)}: give as many --nodes as --hosts"
        )
    for host in hosts:
        if not _HOST.match(host):
            raise EnvkitError(f"--hosts: {host!r} is not a host name (letters, digits, '.', '-')")


def _names(text: str) -> tuple[str, ...]:
    return tuple(name for name in text.split(",") if name)


ENGINE = Engine(
    name="hosts",
    accelerators=("none", "gpus"),
    options=(Option("hosts", "hosts: comma-separated host names, the rendezvous host first", default=(), type=_names),),
    plan=plan,
    check=check,
)

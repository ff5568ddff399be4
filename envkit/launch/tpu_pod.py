"""Cloud TPU pod slices: the same container on every worker, through gcloud ... --worker=all.

The workers have Docker but not this project, so the docker run line is written
here rather than by run.sh; it keeps run.sh's TPU flags (--privileged for the
chips, host networking for the slice). The image arrives by a registry pull of
the digest envkit push recorded (--registry) or as envkit save's tarball copied
with tpu-vm scp and loaded with envkit load, which checks it against its manifest.
The container is named, so one docker stop on all workers ends the run.
"""

from __future__ import annotations

import re
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.launch import images
from envkit.launch import job as jobs
from envkit.launch.plan import MARK, LaunchPlan
from envkit.launch.shell import Raw, line
from envkit.launch.spec import Engine, Option
from envkit.support.provenance_records import RESULTS_FOLDER

DOCKER = ("sudo", "docker")  # TPU VM users are not in the docker group
WORKER_DIR = "envkit"  # under the ssh user's home on each worker


def _gcloud(job: jobs.Job, verb: str, *operands: str, worker: str = "all") -> tuple[str, ...]:
    return ("gcloud", "compute", "tpus", "tpu-vm", verb, *operands, "--zone", job.options.zone, f"--worker={worker}")


def ssh(job: jobs.Job, command: str) -> tuple[str, ...]:
    return (*_gcloud(job, "ssh", job.options.tpu), "--command", command)


def container_name(job: jobs.Job) -> str:
    return f"envkit-{job.name}"


def _manifest(tarball: str) -> str:
    return tarball[: -len(".tar.gz")] + ".manifest.json" if tarball.endswith(".tar.gz") else tarball


def _kind_flags(job: jobs.Job) -> list[str]:
    """docker run's flags for the kind's containers, as run.sh gives them (kinds.yaml's run: the chips' privilege,
    the slice's host network, /dev/shm, PJRT_DEVICE)."""
    settings = job.kind_run
    flags = [*settings.docker_args, *(["--net=host"] if settings.host_network else [])]
    flags += ["--shm-size", settings.shm_size] if settings.shm_size else ["--ipc=host"]
    return flags + [word for key, value in settings.env.items() for word in ("-e", f"{key}={value}")]


def remote_command(job: jobs.Job) -> str:
    """What each worker runs: fetch or load the image, then the container in the foreground."""
    tarball = job.options.image_tarball
    if tarball:
        fetch = line("envkit", "load", f"{WORKER_DIR}/{Path(tarball).name}")
    else:
        fetch = line(*DOCKER, "pull", job.image)
    dirs = [Raw(f'"$HOME"/{WORKER_DIR}/data'), Raw(f'"$HOME"/{WORKER_DIR}/{RESULTS_FOLDER}')]
    run = line(
        *DOCKER,
        "run",
        "--rm",
        "--init",
        "--name",
        container_name(job),
        "--user",
        Raw('"$(id -u):$(id -g)"'),
        "-e",
        "HOME=/tmp",
        *_kind_flags(job),
        *(word for key, value in (*job.container_env(), *_settings(job)) for word in ("-e", f"{key}={value}")),
        *(("--env-file", _worker_env_file(job)) if job.given_env else ()),
        "-v",
        Raw(f'"$HOME"/{WORKER_DIR}/data:{jobs.CONTAINER_DATA}'),
        "-v",
        Raw(f'"$HOME"/{WORKER_DIR}/{RESULTS_FOLDER}:{jobs.CONTAINER_RESULTS}'),
        job.image,
        *job.wrapped(job.command()),
    )
    steps = " && ".join([line("mkdir", "-p", *dirs), fetch, run])
    if not job.given_env:
        return steps
    # The env file holds the --env values: gone from the worker as its command exits, however the run ended (the
    # exit status stays the run's); docker read it when the container started.
    return f"{line('trap', line('rm', '-f', '--', _worker_env_file(job)), 'EXIT')}; {steps}"


def _worker_env_file(job: jobs.Job) -> Raw:
    return Raw(f'"$HOME"/{WORKER_DIR}/{env_file_name(job)}')


def _settings(job: jobs.Job) -> tuple[tuple[str, str], ...]:
    """The experiment's env: (envkit.yaml's, checked for secrets as it loads), set on docker run's command line."""
    return tuple((name, value) for name, value in job.env if name not in job.given_env)


def env_file_name(job: jobs.Job) -> str:
    return f"{job.name}.env"


def env_file(job: jobs.Job) -> str:
    """docker run's --env-file of the --env values, copied to each worker: never a command line, which gcloud's and
    the worker's process lists show (nor the run's argv: its record, the report, the page)."""
    given = [f"{name}={value}" for name, value in job.env if name in job.given_env]
    return "\n".join([f"{MARK}--env of experiment {job.experiment}, target {job.target}.", *given, ""])


def stop_command(job: jobs.Job) -> tuple[str, ...]:
    return ssh(job, line(*DOCKER, "stop", container_name(job)))


def plan(job: jobs.Job, output: Path) -> LaunchPlan:
    tarball = job.options.image_tarball
    sent = (tarball, _manifest(tarball)) if tarball else ()
    files = ((str(output / env_file_name(job)), env_file(job)),) if job.given_env else ()
    sent += tuple(path for path, _ in files)
    copy: tuple[tuple[str, ...], ...] = ()
    if sent:
        copy = (
            ssh(job, line("mkdir", "-p", WORKER_DIR)),
            _gcloud(job, "scp", *sent, f"{job.options.tpu}:{WORKER_DIR}/"),
        )
    fetch_results = _gcloud(
        job, "scp", "--recurse", f"{job.options.tpu}:{WORKER_DIR}/{RESULTS_FOLDER}", ".", worker="0"
    )
    stop_again = (
        "envkit",
        "launch",
        job.experiment,
        "--on",
        "tpu-pod",
        "--tpu",
        job.options.tpu,
        "--zone",
        job.options.zone,
        "--stop",
    )
    return LaunchPlan(
        files=files,
        commands=(*copy, ssh(job, remote_command(job))),
        results=f"~/{WORKER_DIR}/{RESULTS_FOLDER} on the worker that runs rank 0 (worker 0)",
        notes=(
            f"stop it on every worker: {line(*stop_command(job))}",
            f"or: {line(*stop_again)}",
            f"fetch the results: {line(*fetch_results)}",
        ),
    )


def check(job: jobs.Job) -> None:
    # gcloud's ssh passes no variable of this machine's to the workers: a value reaches them in a file, copied
    jobs.refuse_secret_env(job, "the env file copied to every worker (docker run --env-file)")
    if job.uses_torchrun:
        raise EnvkitError(
            f"--on tpu-pod starts {job.experiment}'s program once on every worker, and it is a scale torchrun "
            f"experiment (torchrun on each host, a c10d rendezvous): run it with --on jobset or --on skypilot"
        )
    newline = next((name for name, value in job.env if name in job.given_env and "\n" in value), None)
    if newline is not None:
        raise EnvkitError(
            f"--env {newline}: --on tpu-pod passes it in docker's --env-file, whose values hold no newline"
        )
    if not (job.options.tpu and job.options.zone):
        missing = " and ".join(
            flag for flag, value in (("--tpu NAME", job.options.tpu), ("--zone ZONE", job.options.zone)) if not value
        )
        raise EnvkitError(f"--on tpu-pod needs {missing}: the TPU VM's name and zone (gcloud compute tpus tpu-vm list)")


# The TPU VM and its zone are Google Cloud's resource names: checked here, as gcloud would refuse them only later.
ENGINE = Engine(
    name="tpu-pod",
    accelerators=("slice",),
    options=(
        images.TARBALL,
        Option(
            "tpu",
            "tpu-pod: the TPU VM's name",
            valid=(
                "a TPU VM name: lowercase letters, digits and '-', starting with a letter",
                re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"),
            ),
        ),
        Option(
            "zone",
            "tpu-pod: the TPU VM's zone",
            valid=("a zone such as us-central2-b", re.compile(r"^[a-z]+(-[a-z]+[0-9]+)+-[a-z]$")),
        ),
    ),
    plan=plan,
    check=check,
    stop=stop_command,
)

"""SkyPilot: a task YAML (num_nodes, accelerators, the image as image_id) for ``sky launch``.

SkyPilot starts ``run`` on every node and tells it the cluster through
SKYPILOT_NODE_IPS / _NODE_RANK / _NUM_NODES / _NUM_GPUS_PER_NODE; torchrun is
built from those (static rendezvous on the first node's address). The script
is one YAML string made by the emitter, its words quoted by shlex.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from envkit.errors import EnvkitError
from envkit.launch import job as jobs
from envkit.launch.plan import MARK, LaunchPlan
from envkit.launch.shell import Raw, line
from envkit.launch.spec import Engine, Option
from envkit.launch.yaml_text import dump
from envkit.support.provenance_records import RESULTS_FOLDER

HEAD = Raw('"$head"')
# Under the run's directory on each node (the home directory); the program runs from the project's root in
# the image, so the run script sets them absolute before it moves there.
DATA, RESULTS = "envkit/data", f"envkit/{RESULTS_FOLDER}"
RUN_SETS = ("ENVKIT_DATA_DIR", "ENVKIT_RESULTS_DIR")


def accelerators(job: jobs.Job) -> str | None:
    if job.options.accelerators:
        return job.options.accelerators
    default = job.devices.get("skypilot_default")
    return f"{default}:{job.gpus_per_node}" if default and job.gpus_per_node else None


def run_script(job: jobs.Job) -> str:
    if job.uses_torchrun:
        nproc = Raw('"$SKYPILOT_NUM_GPUS_PER_NODE"') if job.gpus_per_node else str(job.processes_per_node)
        start = [
            "torchrun",
            "--nnodes",
            Raw('"$SKYPILOT_NUM_NODES"'),
            "--nproc-per-node",
            nproc,
            "--node-rank",
            Raw('"$SKYPILOT_NODE_RANK"'),
            "--master-addr",
            HEAD,
            "--master-port",
            str(job.rdzv_port),
        ]
        first = ["head=${SKYPILOT_NODE_IPS%%$'\\n'*}  # the first line: the head node's address"]
    else:
        start, first = None, []
    return "\n".join(
        [
            "set -euo pipefail",
            line("mkdir", "-p", DATA, RESULTS),
            f'export {RUN_SETS[0]}="$PWD/{DATA}" {RUN_SETS[1]}="$PWD/{RESULTS}"',
            *first,
            line("cd", jobs.IMAGE_PROJECT),
            line(*job.wrapped(job.command(start))),
            "",
        ]
    )


def task(job: jobs.Job) -> dict[str, Any]:
    resources: dict[str, Any] = {"image_id": f"docker:{job.image}"}
    if accelerators(job):
        resources["accelerators"] = accelerators(job)
    # The data and results directories are absolute only on the node, so the run script sets them.
    envs = {name: value for name, value in (*job.image_env(), *job.run_env(DATA, RESULTS)) if name not in RUN_SETS}
    envs.update(job.kind_run.env)
    envs.update(job.written_env())  # an --env secret goes by name: sky launch --env NAME (plan)
    return {"name": job.name, "num_nodes": job.nodes, "resources": resources, "envs": envs, "run": run_script(job)}


def plan(job: jobs.Job, output: Path) -> LaunchPlan:
    path = str(output / f"{job.name}.sky.yaml")
    fetch = line("rsync", "-a", f"{job.name}:{RESULTS}/", f"{RESULTS_FOLDER}/")
    return LaunchPlan(
        files=((path, f"{MARK}experiment {job.experiment}, target {job.target}.\n{dump(task(job))}"),),
        # --env NAME alone: sky reads its value from the environment it runs in (envkit's plan.environment)
        commands=(("sky", "launch", "--yes", "--cluster", job.name, *_by_name(job), path),),
        results=f"~/{RESULTS} on the head node (rank 0): {fetch}",
        notes=(*job.image_notes(), f"stop it: {line('sky', 'down', '--yes', job.name)}"),
    )


def _by_name(job: jobs.Job) -> list[str]:
    return [word for name in job.secret_env for word in ("--env", name)]


def check(job: jobs.Job) -> None:
    if job.devices["accelerator"] == "slice" and not job.options.accelerators:
        raise EnvkitError("--on skypilot for a TPU experiment needs --accelerators, e.g. tpu-v5e-16")


ENGINE = Engine(
    name="skypilot",
    accelerators=("none", "gpus", "slice"),
    options=(
        Option(
            "accelerators",
            "skypilot: e.g. A100:8 or tpu-v5e-16 (default A100:<gpus-per-node>)",
            # SkyPilot's NAME[:COUNT]: checked here, as sky would refuse it only once the job runs.
            valid=(
                "NAME[:COUNT] such as A100:8 or tpu-v5e-16 (COUNT a positive number)",
                re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(:([1-9][0-9]*|[0-9]*\.[0-9]*[1-9][0-9]*))?$"),
            ),
        ),
    ),
    plan=plan,
    check=check,
    reserved_env=("SKYPILOT_",),
)

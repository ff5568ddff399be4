"""Kubernetes: a Kubeflow PyTorchJob (v1) or a JobSet, built as data and emitted by PyYAML.

Both run a bare ``torchrun RECIPE`` that reads its settings from PET_* variables:
the training operator injects them into a PyTorchJob's pods; a JobSet gets them
from its own spec (node rank = the Indexed Job's completion index, master = pod
0's name behind the JobSet's headless service). A TPU experiment becomes a JobSet
on a GKE TPU slice: TPU node selectors, privileged, host network, one container
per TPU host (PJRT discovers the slice).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from envkit.errors import EnvkitError
from envkit.launch import job as jobs
from envkit.launch.plan import MARK, LaunchPlan
from envkit.launch.shell import line
from envkit.launch.spec import Engine, Option
from envkit.launch.yaml_text import dump
from envkit.support.provenance_records import RESULTS_FOLDER

PYTORCHJOB_API = "kubeflow.org/v1"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
REPLICATED_JOB = "node"
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
TPU_SELECTORS = ("cloud.google.com/gke-tpu-accelerator", "cloud.google.com/gke-tpu-topology")
# A Kubernetes object name that also serves as a DNS label (RFC 1123).
_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
JOB_NAME = (
    "a valid Kubernetes name (DNS-1123 label): lowercase letters, digits and '-', starting and ending with "
    "a letter or digit, at most 63 characters; set --name",
    _DNS_1123_LABEL,
)


def _metadata(job: jobs.Job) -> dict[str, Any]:
    return {"name": job.name, "labels": {"app.kubernetes.io/managed-by": "envkit", "envkit/experiment": job.experiment}}


def literal(value: str) -> str:
    """``value`` as the program gets it: the kubelet expands $(NAME) in a container's command, args and env values,
    and turns $$ into $, so every $ is written $$."""
    return value.replace("$", "$$")


def _command(job: jobs.Job) -> list[str]:
    # torchrun takes its settings from the PET_* variables the operator sets.
    return [literal(word) for word in job.wrapped(job.command(["torchrun"] if job.uses_torchrun else None))]


def _env(pairs) -> list[dict[str, str]]:
    return [{"name": name, "value": literal(value)} for name, value in pairs]


def _container(job: jobs.Job, name: str, env: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": job.image,
        "imagePullPolicy": "IfNotPresent",
        "command": _command(job),
        # The kind's variables as run.sh sets them (PJRT_DEVICE on TPU), then the engine's, then --env's.
        "env": [*_env(job.container_env()), *_env(job.kind_run.env.items()), *env, *_env(job.env)],
        "volumeMounts": [
            {"name": "envkit", "mountPath": jobs.CONTAINER_DATA, "subPath": "data"},
            {"name": "envkit", "mountPath": jobs.CONTAINER_RESULTS, "subPath": RESULTS_FOLDER},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    resource = job.devices.get("kubernetes_resource")
    count = job.options.tpu_chips_per_node if job.devices["accelerator"] == "slice" else job.gpus_per_node
    if resource and count and (job.asks_gpus or job.devices["accelerator"] == "slice"):
        container["resources"] = {"limits": {resource: count}}
    if "--privileged" in job.kind_run.docker_args:  # as run.sh starts the kind's containers
        container["securityContext"] = {"privileged": True}
    return container


def _pod_spec(job: jobs.Job, container: dict[str, Any], restart: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "containers": [container],
        "volumes": [
            {"name": "envkit", "persistentVolumeClaim": {"claimName": job.options.volume_claim}},
            # DataLoader workers and NCCL need more than the runtime's 64 MB /dev/shm.
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        ],
    }
    if job.devices["accelerator"] == "slice":
        spec["nodeSelector"] = dict(zip(TPU_SELECTORS, (job.options.tpu_accelerator, job.options.tpu_topology)))
    if job.kind_run.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    return spec


def pytorchjob(job: jobs.Job) -> dict[str, Any]:
    # The operator finds the training container by its name, "pytorch".
    def replica(count: int) -> dict[str, Any]:
        # A fresh dict for each role: shared ones would come out as YAML anchors.
        spec = _pod_spec(job, _container(job, "pytorch", []), "OnFailure")
        return {"replicas": count, "restartPolicy": "OnFailure", "template": {"spec": spec}}

    replicas = {"Master": replica(1)}
    if job.nodes > 1:
        replicas["Worker"] = replica(job.nodes - 1)
    return {
        "apiVersion": PYTORCHJOB_API,
        "kind": "PyTorchJob",
        "metadata": _metadata(job),
        "spec": {
            "nprocPerNode": str(job.processes_per_node),
            "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 0},
            "pytorchReplicaSpecs": replicas,
        },
    }


def jobset(job: jobs.Job) -> dict[str, Any]:
    env: list[dict[str, Any]] = []
    if job.uses_torchrun:
        master = f"{job.name}-{REPLICATED_JOB}-0-0.{job.name}"
        env += [
            {"name": "PET_NNODES", "value": str(job.nodes)},
            {"name": "PET_NPROC_PER_NODE", "value": str(job.processes_per_node)},
            {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
            {"name": "PET_MASTER_ADDR", "value": master},
            {"name": "PET_MASTER_PORT", "value": str(job.rdzv_port)},
        ]
    container = _container(job, "envkit", env)
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": _metadata(job),
        "spec": {
            # Pods are named <jobset>-<job>-<index>-<pod> under the headless service <jobset>.
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [
                {
                    "name": REPLICATED_JOB,
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": job.nodes,
                            "completions": job.nodes,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "template": {"spec": _pod_spec(job, container, "Never")},
                        }
                    },
                }
            ],
        },
    }


def _plan(job: jobs.Job, output: Path, manifest: dict[str, Any], suffix: str) -> LaunchPlan:
    path = str(output / f"{job.name}.{suffix}.yaml")
    kind = manifest["kind"]
    return LaunchPlan(
        files=((path, f"{MARK}experiment {job.experiment}, target {job.target}.\n{dump(manifest)}"),),
        commands=(("kubectl", "apply", "-f", path),),
        results=f"the PersistentVolumeClaim {job.options.volume_claim!r}, under results/ (written by rank 0)",
        notes=(
            *job.image_notes(),
            f"follow it: {line('kubectl', 'get', kind.lower(), job.name)}; "
            f"delete it: {line('kubectl', 'delete', '-f', path)}",
        ),
    )


def plan_pytorchjob(job: jobs.Job, output: Path) -> LaunchPlan:
    return _plan(job, output, pytorchjob(job), "pytorchjob")


def plan_jobset(job: jobs.Job, output: Path) -> LaunchPlan:
    return _plan(job, output, jobset(job), "jobset")


def check(job: jobs.Job) -> None:
    """kubectl apply takes every value from the manifest: an --env secret would be written there."""
    jobs.refuse_secret_env(
        job,
        "the manifest kubectl applies",
        "; or make a Kubernetes Secret and name it in the manifest --dry-run prints (env: valueFrom: secretKeyRef)",
    )


def check_jobset(job: jobs.Job) -> None:
    check(job)
    if job.devices["accelerator"] == "slice" and not (job.options.tpu_accelerator and job.options.tpu_topology):
        raise EnvkitError(
            "a TPU JobSet needs --tpu-accelerator (GKE's name, e.g. tpu-v5-lite-podslice) and --tpu-topology (e.g. 4x4)"
        )
    if job.options.tpu_chips_per_node < 1:
        raise EnvkitError(f"--tpu-chips-per-node {job.options.tpu_chips_per_node} is not allowed; give 1 or more")


# Both engines mount data/ and results/ from one claim.
VOLUME_CLAIM = Option(
    "volume_claim",
    "pytorchjob, jobset: PersistentVolumeClaim holding data/ and results/ (default envkit)",
    default="envkit",
    valid=("a PersistentVolumeClaim name (DNS-1123 label)", _DNS_1123_LABEL),
)
PYTORCHJOB = Engine(
    name="pytorchjob",
    accelerators=("none", "gpus"),
    options=(VOLUME_CLAIM,),
    plan=plan_pytorchjob,
    check=check,
    job_name=JOB_NAME,
    reserved_env=("PET_",),
)
JOBSET = Engine(
    name="jobset",
    accelerators=("none", "gpus", "slice"),
    options=(
        VOLUME_CLAIM,
        Option(
            "tpu_accelerator",
            "jobset on TPU: GKE accelerator, e.g. tpu-v5-lite-podslice",
            valid=("GKE's accelerator name such as tpu-v5-lite-podslice", _DNS_1123_LABEL),
        ),
        Option(
            "tpu_topology",
            "jobset on TPU: slice topology, e.g. 4x4",
            valid=("a slice topology such as 4x4 or 2x2x4", re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*){1,2}$")),
        ),
        Option("tpu_chips_per_node", "jobset on TPU: chips per host (default 4)", default=4, type=int),
    ),
    plan=plan_jobset,
    check=check_jobset,
    job_name=JOB_NAME,
    reserved_env=("PET_",),
)

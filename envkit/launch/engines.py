"""Which renderer turns a Job into each engine's plan."""

from __future__ import annotations

from pathlib import Path

from envkit.launch import hosts, kubernetes, skypilot, slurm, tpu_pod
from envkit.launch.job import Job
from envkit.launch.plan import Plan

RENDERERS = {
    "hosts": hosts.plan,
    "slurm": slurm.plan,
    "pytorchjob": kubernetes.plan_pytorchjob,
    "jobset": kubernetes.plan_jobset,
    "tpu-pod": tpu_pod.plan,
    "skypilot": skypilot.plan,
}


def render_job(engine: str, job: Job, output: Path) -> Plan:
    return RENDERERS[engine](job, output)

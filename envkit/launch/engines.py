"""The launch engines: each is one module (its options, checks and plan: envkit.launch.spec), listed here once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.launch import hosts, kaggle, kubernetes, skypilot, slurm, tpu_pod
from envkit.launch import job as jobs
from envkit.launch.plan import LaunchPlan
from envkit.launch.spec import Engine, Option

# --on NAME -> its engine, in the order --help lists them. A new engine is its module and one line here.
REGISTRY: dict[str, Engine] = {
    engine.name: engine
    for engine in (
        hosts.ENGINE,
        slurm.ENGINE,
        kubernetes.PYTORCHJOB,
        kubernetes.JOBSET,
        tpu_pod.ENGINE,
        skypilot.ENGINE,
        kaggle.ENGINE,
    )
}


def engine(name: str) -> Engine:
    if name not in REGISTRY:
        raise EnvkitError(f"unknown engine {name!r}; choose from {', '.join(REGISTRY)}")
    return REGISTRY[name]


def options() -> list[Option]:
    """Every engine's options, each once (engines may share one), in the registry's order: launch's flags."""
    return list({option.name: option for engine in REGISTRY.values() for option in engine.options}.values())


def build_job(on: str, experiment, target, **choices) -> jobs.Job:
    """The job ``--on`` runs (envkit.launch.job.build_job, told which engines fit the experiment's kind)."""
    fitting = tuple(other.name for other in REGISTRY.values() if experiment.kind in other.kinds)
    reserved = tuple(prefix for other in REGISTRY.values() for prefix in other.reserved_env)
    return jobs.build_job(experiment, target, engine=engine(on), fitting=fitting, reserved_env=reserved, **choices)


def render_job(on: str, job: jobs.Job, output: Path) -> LaunchPlan:
    """The engine's plan; its files are its owner's alone where they hold --env values (a secret, maybe)."""
    return replace(engine(on).plan(job, output), private=bool(job.given_env))

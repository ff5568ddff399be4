"""The launch engines: each is one module (its options, checks and plan: envkit.launch.spec), listed here once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from envkit.errors import EnvkitError
from envkit.launch import hosts, kaggle, kubernetes, skypilot, slurm, tpu_pod
from envkit.launch import job as jobs
from envkit.launch.plan import LaunchPlan
from envkit.launch.spec import Engine, Option


def registry(*listed: Engine) -> dict[str, Engine]:
    """--on NAME -> its engine, in the order given. An option is its engine's own: two engines may list one declaration
    (images.TARBALL), never declare two of one name, which would meet as one flag (the CLI refuses one that is
    launch's own)."""
    found: dict[str, Engine] = {}
    declared: dict[str, tuple[Option, str]] = {}
    for listing in listed:
        if listing.name in found:
            raise EnvkitError(f"two launch engines are named {listing.name!r}: give each its own --on name")
        for option in listing.options:
            first, owner = declared.setdefault(option.name, (option, listing.name))
            if first != option:
                raise EnvkitError(
                    f"launch engines {owner} and {listing.name} both declare {option.flag}: an engine's options are "
                    f"its own, rename one"
                )
        found[listing.name] = listing
    return found


# In the order --help lists them. A new engine is its module and one line here.
REGISTRY = registry(
    hosts.ENGINE,
    slurm.ENGINE,
    kubernetes.PYTORCHJOB,
    kubernetes.JOBSET,
    tpu_pod.ENGINE,
    skypilot.ENGINE,
    kaggle.ENGINE,
)


def engine(name: str) -> Engine:
    if name not in REGISTRY:
        raise EnvkitError(f"unknown engine {name!r}; choose from {', '.join(REGISTRY)}")
    return REGISTRY[name]


def options() -> list[Option]:
    """Every engine's options, each once, in the registry's order: launch's engine flags."""
    return list({option.name: option for engine in REGISTRY.values() for option in engine.options}.values())


def given_options(on: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The options of ``on``'s engine among ``given`` (the parsed flags, an engine flag only where given); another
    engine's is refused in one line."""
    chosen = engine(on)
    for option in options():
        if option.name in given and option not in chosen.options:
            owners = ", ".join(name for name, other in REGISTRY.items() if option in other.options)
            own = ", ".join(mine.flag for mine in chosen.options) or "none"
            raise EnvkitError(f"{option.flag} is an option of --on {owners}, not of --on {on} (its own: {own})")
    return {option.name: given[option.name] for option in chosen.options if option.name in given}


def build_job(on: str, experiment, target, **choices) -> jobs.Job:
    """The job ``--on`` runs (envkit.launch.job.build_job, told which engines fit the experiment's kind)."""
    fitting = tuple(other.name for other in REGISTRY.values() if experiment.kind in other.kinds)
    reserved = tuple(prefix for other in REGISTRY.values() for prefix in other.reserved_env)
    return jobs.build_job(experiment, target, engine=engine(on), fitting=fitting, reserved_env=reserved, **choices)


def render_job(on: str, job: jobs.Job, output: Path) -> LaunchPlan:
    """The engine's plan; its files are its owner's alone where they hold --env values, and its clients get the
    secrets among them (``Job.secret_env``) in their environment, which no file holds."""
    return replace(engine(on).plan(job, output), private=bool(job.given_env), environment=job.secret_values())

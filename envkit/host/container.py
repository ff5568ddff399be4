"""A recipe run in a target's built image, through the target's rendered run.sh (`envkit run`, `doctor --probe --image`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def recipe_command(
    config,
    target,
    recipe: str,
    recipe_args: list[str],
    *,
    tag: str | None = None,
    gpus: str | None = None,
    results_dir: Path = Path("results"),
    data_dir: Path = Path("data"),
) -> tuple[dict[str, str], list[str]]:
    """What runs ``recipe`` in ``target``'s image (``tag``, default latest): the variables run.sh reads, and its argv."""
    from envkit.image.build import LATEST, repository

    env = {
        "IMAGE": f"{repository(target.name)}:{tag or LATEST}",
        "RESULTS_DIR": str(results_dir.resolve()),
        "DATA_DIR": str(data_dir.resolve()),
        **({"GPUS": gpus} if gpus else {}),
    }
    # run.sh is the one definition of how a target's container runs (user, GPUs,
    # mounts, TPU flags); users without envkit call it directly, so we do too.
    return env, [str(config.root / "docker" / target.name / "run.sh"), recipe, *recipe_args]


def run_recipe(
    config,
    target,
    recipe: str,
    recipe_args: list[str],
    *,
    tag: str | None = None,
    gpus: str | None = None,
    results_dir: Path = Path("results"),
    data_dir: Path = Path("data"),
) -> int:
    """Run ``recipe`` in ``target``'s image (``tag``, default latest) on this host; the recipe's exit status."""
    from envkit.host import doctor
    from envkit.image.build import resolve_image
    from envkit.support.docker_client import connect_docker  # looked up here: tests replace the engine

    doctor.require(doctor.inspect_host(), target.kind, gpus)
    resolve_image(connect_docker(), target.name, tag)  # one line now if it was never built
    # Created here so they belong to the caller; docker would create them as root.
    for directory in (results_dir, data_dir):
        directory.mkdir(parents=True, exist_ok=True)
    env, argv = recipe_command(
        config, target, recipe, recipe_args, tag=tag, gpus=gpus, results_dir=results_dir, data_dir=data_dir
    )
    return subprocess.run(argv, env={**os.environ, **env}, check=False).returncode

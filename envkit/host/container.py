"""A recipe or a script of the project run in a target's built image, through the target's rendered run.sh
(`envkit run`, `doctor --probe --image`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path, PurePosixPath

from envkit.errors import EnvkitError
from envkit.project.experiments import RECIPES
from envkit.support.provenance_records import RESULTS_FOLDER
from envkit.support.shellquote import command_line


def run_recipe(
    config,
    target,
    recipe: str,
    recipe_args: list[str],
    *,
    tag: str | None = None,
    gpus: str | None = None,
    results_dir: Path = Path(RESULTS_FOLDER),
    data_dir: Path = Path("data"),
    dry_run: bool = False,
) -> int:
    """Run ``recipe`` (see ``script``) in ``target``'s image (``tag``, default latest) on this host; its exit
    status. ``dry_run``: print the run.sh line instead, and check, create and run nothing."""
    from envkit.image.build import LATEST, repository

    env = {
        "IMAGE": f"{repository(target.name)}:{tag or LATEST}",
        "RESULTS_DIR": str(results_dir.resolve()),
        "DATA_DIR": str(data_dir.resolve()),
        **({"GPUS": gpus} if gpus else {}),
    }
    # run.sh is the one definition of how a target's container runs (user, GPUs,
    # mounts, TPU flags); users without envkit call it directly, so we do too.
    argv = [
        str(config.output.image_folder(config.root, target.name) / "run.sh"),
        "python",
        script(config, recipe),
        *recipe_args,
    ]
    if dry_run:
        print(command_line(env, argv))
        return 0
    from envkit.host import doctor
    from envkit.image.build import resolve_image
    from envkit.support.docker_client import connect_docker  # looked up here: tests replace the engine

    doctor.require(doctor.inspect_host(), target.kind, gpus)
    resolve_image(connect_docker(), target.name, tag)  # one line now if it was never built
    run_sh = Path(argv[0])
    if not run_sh.is_file():
        raise EnvkitError(
            f"{run_sh} is missing: {target.name}'s files are not rendered; run `envkit render --all` (and commit "
            "docker/), then try again"
        )
    # Created here so they belong to the caller; docker would create them as root.
    for directory in (results_dir, data_dir):
        directory.mkdir(parents=True, exist_ok=True)
    try:
        return subprocess.run(argv, env={**os.environ, **env}, check=False).returncode
    except OSError as exc:  # run.sh made not executable (chmod -x) or not a script the kernel can start
        raise EnvkitError(f"{run_sh} cannot be started ({exc.strerror}): run `envkit render --all` again") from None


def script(config, name: str) -> str:
    """The project's Python file that ``name`` names, as run.sh runs it from the project's root in the image: a
    recipe's name (recipes/<name>.py) or a script's path (train.py, src/train.py); one line when the project does
    not have it or its image cannot hold it."""
    from envkit.project.files import files_of

    path = PurePosixPath(name if name.endswith(".py") else f"{RECIPES}/{name}.py")
    allowed = "a recipe's name (recipes/NAME.py) or the path of a Python script in the project, e.g. train.py"
    if path.is_absolute() or ".." in path.parts or not (config.root / path).is_file():
        raise EnvkitError(f"no {path} in the project {config.root}: give {allowed}")
    files_of(config, quiet=True).require(path.as_posix())
    return path.as_posix()

"""Load envkit.yaml into validated, frozen targets (design.md section 1).

Three passes, each failing with one line that names the file, line and field:
YAML syntax, the shipped JSON Schema (types, allowed characters, unknown keys
with the closest suggestion), then the compatibility matrix (versions that must
go together).
"""

from __future__ import annotations

from pathlib import Path

from envkit.project import DEFAULT_CONFIG
from envkit.project.config import ProjectConfig
from envkit.project.document import read_document
from envkit.project.experiments import load_experiments
from envkit.project.files import DEFAULT_LIMIT_MB, refuse_secret_values
from envkit.project.matrix import load_matrix
from envkit.project.output import read_output
from envkit.project.targets import build_target, with_project_requirements


def load_config(path: str | Path = DEFAULT_CONFIG) -> ProjectConfig:
    path = Path(path)
    data, where = read_document(path)
    root = path.resolve().parent
    include_secrets = tuple(data.get("include_secrets", ()))
    # load_experiments checks the experiments, wherever they are written
    refuse_secret_values(
        path, root, {key: value for key, value in data.items() if key != "experiments"}, include_secrets
    )
    matrix = load_matrix()
    # A malformed experiment is bad input to every command that reads the project. The recipes' packages (tqdm)
    # go into the images of a project that runs a seed recipe only: a project of its own commands locks its
    # requirements, plus what envkit's run wrapper needs at run time (nothing: it is standard library only).
    recipes = any(experiment.recipe is not None for experiment in load_experiments(path).values())
    targets = {name: build_target(name, raw, root, matrix, where, recipes) for name, raw in data["targets"].items()}
    if "requirements" in data:
        targets = with_project_requirements(targets, data, root, where)
    return ProjectConfig(
        path=path,
        root=root,
        source=data.get("source"),
        targets=targets,
        files_limit_mb=data.get("files_limit_mb", DEFAULT_LIMIT_MB),
        include_secrets=include_secrets,
        output=read_output(data, root, where),
    )

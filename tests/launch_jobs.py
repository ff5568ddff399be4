"""Jobs for the launch tests: fixed paths, so that renders are the same on every machine."""

from __future__ import annotations

from pathlib import Path

from envkit.project.config import load_config
from envkit.project.experiments import experiment
from envkit.image.build import repository
from envkit.launch.job import EngineOptions, build_job

REPO_ROOT = Path(__file__).resolve().parent.parent
ROOT = Path("/srv/envkit")
OUTPUT = Path("jobs")


def make_job(name: str, engine: str, *, nodes: int = 2, image: str | None = None, root: Path = ROOT,
             data_dir: Path = Path("/shared/data"), results_dir: Path = Path("/shared/results"), **kwargs):
    exp = experiment(name)
    config = load_config(REPO_ROOT / "envkit.yaml")
    target = next(t for t in config.targets.values() if t.kind == exp.kind)
    options = kwargs.pop("options", EngineOptions())
    return build_job(
        exp, target, engine=engine, nodes=nodes, root=root, data_dir=data_dir,
        results_dir=results_dir, image=image or f"{repository(target.name)}:latest", options=options, **kwargs,
    )

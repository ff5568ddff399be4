"""The committed notebooks: every notebook target's `notebooks` list, kept under notebooks/.

`envkit render` writes them beside the Dockerfiles and `envkit render --check`
reports them stale the same way (the render package's all-or-nothing writer and
comparison do both), so a changed recipe, lock, helper or envkit report shows up
in CI like a changed template.
"""

from __future__ import annotations

from pathlib import Path

from envkit.notebook import NOTEBOOKS
from envkit.notebook.builder import render_notebook
from envkit.project.config import ProjectConfig
from envkit.render.output import RenderedFile

MODE = 0o644


def render(config: ProjectConfig, names: list[str]) -> list[RenderedFile]:
    """The notebooks of the notebook targets among ``names``, paths relative to notebooks/."""
    files = []
    for name in names:
        target = config.target(name)
        for experiment in target.notebooks:
            notebook = render_notebook(config, experiment, target.name)
            files.append(RenderedFile(notebook.path.relative_to(NOTEBOOKS), notebook.text, MODE))
    return files


def orphans(folder: Path, files: list[RenderedFile]) -> list[str]:
    """Notebooks in ``folder`` (notebooks/) that no target's `notebooks` list renders any more."""
    rendered = {file.path.name for file in files}
    leftovers = sorted(path for path in folder.glob("*.ipynb") if path.name not in rendered)
    return [f"{path}: no notebook target lists it (remove it)" for path in leftovers]

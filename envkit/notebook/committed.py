"""The committed notebooks: every notebook target's `notebooks` list, kept in notebooks/<target>/.

`envkit render` writes them as it writes docker/<target>/ and `envkit render --check`
reports them stale the same way (envkit.render.output writes all or nothing and
compares), so a changed recipe, lock, helper or envkit report shows up in CI like a
changed template.
"""

from __future__ import annotations

from pathlib import Path

from envkit.project.marks import begins_with, notebook_mark
from envkit.render.output import RenderedFile

MODE = 0o644


def render(config, names: list[str]) -> list[RenderedFile]:
    """The notebooks of the notebook targets among ``names``, paths relative to the config's
    notebook folder (<target>/<experiment>.ipynb)."""
    listed = [(experiment, name) for name in names for experiment in config.target(name).notebooks]
    if not listed:
        return []  # the builder's imports (nbformat) cost a project without notebooks a third of its render
    from envkit.notebook.builder import render_notebook  # nbformat, Jinja: not for `render --check` from the memo

    files = []
    for experiment, name in listed:
        notebook = render_notebook(config, experiment, name, committed=True)
        files.append(RenderedFile(notebook.path.relative_to(config.output.notebooks), notebook.text, MODE))
    return files


def leftovers(folder: Path, files: list[RenderedFile]) -> list[Path]:
    """Notebooks under ``folder`` (notebooks/<target>/) that render wrote there and no target's `notebooks` list
    renders any more (its target removed, or the experiment taken off its list): `render --all` removes them.
    Each is found by its mark (the first cell, from templates/notebook/), which names its experiment and
    target: one without it, one the user moved to another folder, or one reached through a link, is the user's,
    neither removed nor asked to be."""
    rendered = {file.path for file in files}
    return sorted(
        path
        for path in folder.glob("*/*.ipynb")
        if path.relative_to(folder) not in rendered
        and begins_with(path, notebook_mark(path.parent.name, path.stem))
        and not path.is_symlink()
        and not path.parent.is_symlink()  # a folder that links elsewhere is the user's, wherever it points
    )


def orphans(folder: Path, files: list[RenderedFile]) -> list[str]:
    return [
        f"{path}: no notebook target lists it: `envkit render --all` removes it" for path in leftovers(folder, files)
    ]

"""The committed notebooks: every notebook target's `notebooks` list, kept in notebooks/<target>/.

`envkit render` writes them as it writes docker/<target>/ and `envkit render --check`
reports them stale the same way (envkit.render.output writes all or nothing and
compares), so a changed recipe, lock, helper or envkit report shows up in CI like a
changed template.
"""

from __future__ import annotations

from pathlib import Path

from envkit.project import NOTEBOOKS
from envkit.render.output import RenderedFile, begins_with

MODE = 0o644
# How every notebook envkit renders begins (templates/notebook/intro.md.j2, its first cell): one
# without it is someone else's, which render neither removes nor asks to remove.
MARK = b"Rendered by envkit from experiment "
MARK_WITHIN = 4096


def render(config, names: list[str]) -> list[RenderedFile]:
    """The notebooks of the notebook targets among ``names``, paths relative to notebooks/
    (<target>/<experiment>.ipynb)."""
    from envkit.notebook.builder import render_notebook  # nbformat, Jinja: not for `render --check` from the memo

    files = []
    for name in names:
        target = config.target(name)
        for experiment in target.notebooks:
            notebook = render_notebook(config, experiment, target.name, committed=True)
            files.append(RenderedFile(notebook.path.relative_to(NOTEBOOKS), notebook.text, MODE))
    return files


def leftovers(folder: Path, files: list[RenderedFile]) -> list[Path]:
    """Notebooks under ``folder`` (notebooks/<target>/) that render wrote and no target's `notebooks` list renders
    any more (its target removed, or the experiment taken off its list): `render --all` removes them."""
    rendered = {file.path for file in files}
    return sorted(
        path
        for path in folder.glob("*/*.ipynb")
        if path.relative_to(folder) not in rendered and begins_with(path, MARK, MARK_WITHIN)
    )


def orphans(folder: Path, files: list[RenderedFile]) -> list[str]:
    return [
        f"{path}: no notebook target lists it: `envkit render --all` removes it" for path in leftovers(folder, files)
    ]

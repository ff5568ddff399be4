"""What `envkit render` renders for a selection (one target, or "--all"): the image targets' files and the
notebook targets' committed notebooks, from the memo (envkit.render.memo) or in full, recorded as it reads.

The notebooks are rendered by the caller's function (envkit.notebook.committed.render): notebooks are a layer
above render.
"""

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from envkit.render import memo
from envkit.render.output import RenderedFile


class Rendered(NamedTuple):
    names: list[str]  # the image targets rendered, in the config's order
    files: list[RenderedFile]  # relative to the image folder: <target>/<file>
    notebook_names: list[str]  # the notebook targets rendered
    notebook_files: list[RenderedFile]  # relative to the notebook folder: <target>/<experiment>.ipynb
    folders: tuple[Path, Path]  # the config's output (images, notebooks), relative to its folder


def render_selection(config_path: Path, selection: str, notebooks: Callable[..., list[RenderedFile]]) -> Rendered:
    """The files of ``selection``: remembered, or rendered with every path read recorded and then remembered."""
    remembered = memo.recall(config_path, selection)
    if remembered is not None:
        names, files, notebook_names, notebook_files, (images, notebooks) = remembered
        return Rendered(names, _files(files), notebook_names, _files(notebook_files), (Path(images), Path(notebooks)))
    from envkit.project.load import load_config
    from envkit.render.target_files import render_targets
    from envkit.support.bounded_load import recording

    with recording() as read:
        config = load_config(config_path)
        chosen = list(config.targets) if selection == "--all" else [config.target(selection).name]
        names = [name for name in chosen if name in config.images]
        notebook_names = [name for name in chosen if name not in config.images]
        folders = (config.output.images, config.output.notebooks)
        rendered = Rendered(
            names, render_targets(config, names), notebook_names, notebooks(config, notebook_names), folders
        )
    stored = [
        names,
        _stored(rendered.files),
        notebook_names,
        _stored(rendered.notebook_files),
        [folder.as_posix() for folder in folders],
    ]
    memo.remember(config_path, selection, stored, read)
    return rendered


def _stored(files: list[RenderedFile]) -> list[list]:
    return [[file.path.as_posix(), file.text, file.mode] for file in files]


def _files(stored: list) -> list[RenderedFile]:
    return [RenderedFile(Path(path), text, mode) for path, text, mode in stored]

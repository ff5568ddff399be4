"""The folders envkit writes in a project (envkit.yaml's `output`): one for the image targets' files, one for the
notebook targets' locks and committed notebooks.

Read once with the config; every module that reads or writes them takes them from ``ProjectConfig.output``.
The schema already refused absolute paths, '.' and '..' parts; this checks what needs the project: two
different folders, neither inside the other, and none holding a file the config names as the project's own.
"""

import os
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from envkit.errors import EnvkitError
from envkit.project import NOTEBOOKS, RENDERED
from envkit.support.provenance_records import RESULTS_FOLDER

# Folders that are never envkit's to write: git's own, and envkit's caches and runs.
RESERVED = (".git", ".cache", RESULTS_FOLDER, "data")


# A NamedTuple, not a dataclass: `render` asks refuse_outside below even when its memo remembers the render, and the
# dataclasses module (with inspect, ast and tokenize) cost that render about 9 ms of CPU.
class Output(NamedTuple):
    """Relative to the project root (the config's folder)."""

    images: Path = RENDERED  # <images>/<target>/: Dockerfile, run.sh, .dockerignore, lock, pushed.json
    notebooks: Path = NOTEBOOKS  # <notebooks>/<target>/: a notebook target's lock and committed notebooks

    def image_folder(self, root: Path, target_name: str) -> Path:
        return root / self.images / target_name

    def notebook_folder(self, root: Path, target_name: str) -> Path:
        return root / self.notebooks / target_name

    def tops(self) -> tuple[str, ...]:
        """Both folders as POSIX paths, for matching git's names."""
        return (self.images.as_posix(), self.notebooks.as_posix())


# A config without `output`: docker/ and notebooks/.
DEFAULT_OUTPUT = Output()


def read_output(data: dict, root: Path, where: Callable[[tuple], str]) -> Output:
    """The config's `output`, checked against the project; ``data`` passed the schema."""
    given = data.get("output", {})
    output = Output(
        Path(PurePosixPath(given.get("images", RENDERED.as_posix()))),
        Path(PurePosixPath(given.get("notebooks", NOTEBOOKS.as_posix()))),
    )
    own = _own_files(data)
    for key, folder in (("images", output.images), ("notebooks", output.notebooks)):
        other = output.notebooks if key == "images" else output.images
        at = where(("output", key))
        if folder == other or folder.is_relative_to(other) or other.is_relative_to(folder):
            raise EnvkitError(
                f"{at}: {folder.as_posix()!r} and {other.as_posix()!r} overlap; allowed: two different folders, "
                "neither inside the other"
            )
        if folder.parts[0] in RESERVED:
            raise EnvkitError(
                f"{at}: {folder.as_posix()!r} is inside {folder.parts[0]}/; allowed: a folder of the project outside "
                f"{', '.join(RESERVED)}"
            )
        clash = next((name for name in own if name == folder or name.is_relative_to(folder)), None)
        if clash is not None:
            raise EnvkitError(
                f"{at}: {folder.as_posix()!r} holds the project's own {clash.as_posix()} (named in the config); "
                "allowed: a folder envkit alone writes"
            )
        if (root / folder).exists() and not (root / folder).is_dir():
            raise EnvkitError(f"{at}: {root / folder} is a file, not a folder; name a folder envkit may create")
    return output


def refuse_outside(root: Path, paths: Iterable[Path]) -> None:
    """One line, before anything is written, for the first of ``paths`` that lies in ``root`` by its name and
    outside it once its links are followed (`ln -s /tmp/elsewhere docker` took `render --all` there). Every
    writer of the project's files asks it: render (images and notebooks), lock, notebook, launch. A path named
    outside ``root`` (an explicit --output elsewhere) is the user's choice, not asked about."""
    named_root = Path(os.path.abspath(root))
    real_root = Path(os.path.realpath(root))
    for path in paths:
        named = Path(os.path.abspath(path))
        real = Path(os.path.realpath(path))
        if named.is_relative_to(named_root) and not real.is_relative_to(real_root):
            raise EnvkitError(
                f"{path} is in {root} but a symbolic link takes it to {real}, outside it: envkit writes only inside "
                "the project; replace the link with a folder, or write elsewhere with --output DIR"
            )


def _own_files(data: dict) -> list[Path]:
    """The project's files the config names: the requirements file, the experiments file, the secrets it carries."""
    named = [data.get("requirements"), data.get("experiments"), *data.get("include_secrets", ())]
    return [Path(PurePosixPath(name)) for name in named if isinstance(name, str)]

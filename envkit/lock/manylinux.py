"""The manylinux tag a lock is resolved for: the glibc of a target's base image or notebook runtime, or, for a
host lock, of the python base image's Debian (envkit/data/base_glibc.yaml maps image tags to their glibc).

Reading a lock needs none of this: envkit/lock/lockfile.py is the format, this is one of the inputs
(envkit/lock/inputs.py) it is resolved from.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from envkit.errors import EnvkitError
from envkit.project.datafile import DATA_DIR, load_table

if TYPE_CHECKING:
    from envkit.project.config import Target

GLIBC_PATH = DATA_DIR / "base_glibc.yaml"


@lru_cache(maxsize=1)
def _glibc_table() -> dict[str, str]:
    return load_table(GLIBC_PATH)["glibc"]  # parsed ahead of time: a render after a lock changed imports no PyYAML


# The newest manylinux tag uv's --python-platform knows (uv 0.13: manylinux_2_40). A newer glibc
# (Debian 13's 2.41) loads every wheel of that tag, so locking for it only leaves out wheels that
# need the newer glibc itself.
UV_NEWEST_GLIBC = "2.40"


def _manylinux(glibc: str) -> str:
    newest = min(glibc, UV_NEWEST_GLIBC, key=lambda version: tuple(int(part) for part in version.split(".")))
    return newest.replace(".", "_")


def target_manylinux(target: Target) -> str:
    """The manylinux tag the target's packages load with (2_36 for Debian 12's glibc 2.36)."""
    return _manylinux(target_glibc(target))


def target_glibc(target: Target) -> str:
    """The glibc the target's packages load with: its base image's, or its notebook runtime's."""
    if target.is_notebook:
        from envkit.project.notebook_platforms import runtime_of

        return runtime_of(target).glibc
    return base_glibc(target)


def base_glibc(target: Target) -> str:
    """The glibc of the target's base OS, from the suffix of the base image's tag."""
    return _image_glibc(target.base_image, f"target {target.name}")


def _image_glibc(base_image: str, subject: str) -> str:
    tag = base_image.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")[2]
    for suffix, glibc in _glibc_table().items():
        if tag.endswith(suffix):
            return glibc
    raise EnvkitError(
        f"{subject}: cannot tell the glibc of base image {base_image}; envkit knows tags ending "
        f"in {', '.join(_glibc_table())} ({GLIBC_PATH.name} lists them)"
    )


def host_manylinux() -> str:
    """The manylinux tag a host lock's Linux wheels are checked against: the glibc of the python base image's OS
    (Debian 12, what CI runs on); a newer glibc loads them too."""
    from envkit.project import kinds
    from envkit.project.config import DEFAULT_PYTHON

    base = next(iter(kinds.load_kinds().values())).python_base_image.format(python=DEFAULT_PYTHON)
    return _manylinux(_image_glibc(base, "host environments"))

"""A project's own dependencies: the file envkit.yaml's ``requirements`` names (requirements.txt, a .in
file, or pyproject.toml's [project.dependencies]), read into the lines every target's lock resolves
together with that target's torch build.

A lock holds released packages of an index, pinned by version and hash, and the images install it with
--only-binary: a line that names something else (a local path, a URL, a VCS checkout, an editable
install, a pip option) can never be in one, so it is refused here, once, naming the file and line.
"""

import re
from pathlib import Path
from typing import NamedTuple

from envkit.errors import EnvkitError
from envkit.project.requirement import allows, plain_requirement, requirement_name
from envkit.support.bounded_load import Refused, read_text

PYPROJECT = "pyproject.toml"
_VCS = r"(?i)^(git|hg|svn|bzr)\+"


class Dependency(NamedTuple):
    line: str  # as written, its comment stripped
    where: str  # file:line, for the one line that names it
    name: str  # PEP 503 normal form
    specifier: str  # e.g. "==2.9.0", ">=1.26,<3"; "" for any version


def read_dependencies(path: Path, shown: str | None = None) -> tuple[Dependency, ...]:
    """The requirements of ``path`` (pyproject.toml: its [project.dependencies]), shown as ``shown``
    in messages; a line no lock can hold is one line naming it."""
    shown = shown or str(path)
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise EnvkitError(
            f"{shown} not found: name a requirements file (requirements.txt, a .in file or {PYPROJECT})"
        ) from None
    except OSError as exc:
        raise EnvkitError(f"cannot read {shown}: {exc.strerror or exc}") from None
    except Refused as exc:
        raise EnvkitError(exc.at(shown)) from None
    lines = _pyproject_lines(text, shown) if path.name == PYPROJECT else _text_lines(text)
    return tuple(_dependency(line, f"{shown}:{number}") for number, line in lines)


def _dependency(line: str, where: str) -> Dependency:
    plain = plain_requirement(line)
    if plain:
        return Dependency(line, where, *plain)
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    unlockable = "a lock holds released packages of an index only: name the package and a version"
    if line.startswith("-"):
        kind = "an editable install" if line.split()[0] in ("-e", "--editable") else "a pip option"
        raise EnvkitError(f"{where}: {line!r} is {kind}; {unlockable}")
    if re.match(_VCS, line):
        raise EnvkitError(f"{where}: {line!r} is a VCS URL; {unlockable}")
    try:
        requirement = Requirement(line)
    except InvalidRequirement:
        looks_local = line.startswith((".", "/", "~")) or line.endswith((".whl", ".zip", ".tar.gz", ".tgz"))
        what = "a local path" if looks_local else ("a URL" if "://" in line else "not a requirement")
        raise EnvkitError(f"{where}: {line!r} is {what}; {unlockable}") from None
    if requirement.url:
        what = (
            "a VCS URL"
            if re.match(_VCS, requirement.url)
            else ("a local path" if requirement.url.startswith("file:") else "a URL")
        )
        raise EnvkitError(f"{where}: {line!r} is {what}; {unlockable}")
    return Dependency(line, where, canonicalize_name(requirement.name), str(requirement.specifier))


# pip-compile --generate-hashes writes `name==1.0 \` then `--hash=sha256:...` lines: the lock makes its own hashes.
_HASH_OPTION = r"(^|\s)--hash[=\s]\S+"


def _text_lines(text: str) -> list[tuple[int, str]]:
    """(number, line) of each requirement: comments stripped, continued lines joined, --hash options dropped."""
    lines, pending = [], None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        continued = line.endswith("\\")
        line = line.removesuffix("\\").strip()
        start, joined = pending if pending is not None else (number, "")
        joined = f"{joined} {line}".strip()
        if continued:
            pending = (start, joined)
            continue
        pending = None
        joined = re.sub(_HASH_OPTION, " ", joined).strip()
        if joined:
            lines.append((start, joined))
    if pending is not None and re.sub(_HASH_OPTION, " ", pending[1]).strip():
        lines.append((pending[0], re.sub(_HASH_OPTION, " ", pending[1]).strip()))
    return lines


def _pyproject_lines(text: str, shown: str) -> list[tuple[int, str]]:
    import tomllib

    try:
        dependencies = tomllib.loads(text).get("project", {}).get("dependencies", [])
    except tomllib.TOMLDecodeError as exc:
        raise EnvkitError(f"{shown}: not TOML: {exc}") from None
    except RecursionError:
        raise EnvkitError(f"{shown}: nested too deep to read; a pyproject.toml nests a few levels") from None
    if not isinstance(dependencies, list) or not all(isinstance(item, str) for item in dependencies):
        raise EnvkitError(f"{shown}: [project] dependencies must be a list of strings")
    # The line each dependency is written on, for the message that names it.
    numbers = {line.strip().rstrip(",").strip("\"'"): n for n, line in enumerate(text.splitlines(), start=1)}
    return [(numbers.get(item.strip(), 1), item.strip()) for item in dependencies]


def with_dependencies(
    target: str,
    pins: dict[str, str | None],
    pip_packages: tuple[str, ...],
    own: dict[str, tuple[str, str]],
    dependencies: tuple[Dependency, ...],
) -> tuple[str, ...]:
    """The target's pip packages with the project's dependencies resolved in.

    ``pins``: every package the matrix owns (torch, torchvision, torch-xla, ...) with the version the
    target's keys give it, None where the target has none (torch-xla on a cpu target: the TPU target
    installs it, so the line is skipped here). ``own``: the target's own pip_packages by name, each with
    where it is written. A dependency on a pinned package must allow the pin, and one the target also
    names in pip_packages must say the same: either conflict is one line naming both pins."""
    added = []
    for dependency in dependencies:
        if dependency.name in pins:
            pin = pins[dependency.name]
            if pin is not None and not allows(dependency.specifier, pin):
                raise EnvkitError(
                    f"{dependency.where}: {dependency.line!r} conflicts with target {target}'s "
                    f"{dependency.name}=={pin}: change one of the two pins"
                )
            continue  # the target's key pins it, from the index its build comes from
        if dependency.name in own:
            written, where = own[dependency.name]
            if requirement_name(written) == dependency.name and written.replace(" ", "") != dependency.line.replace(
                " ", ""
            ):
                raise EnvkitError(
                    f"{dependency.where}: {dependency.line!r} conflicts with target {target}'s pip_packages "
                    f"{written!r} ({where}): keep one"
                )
            continue
        added.append(dependency)
    names = {dependency.name for dependency in added}
    # The project's own spec replaces envkit's default for a recipe package (tqdm), as pip_packages does.
    kept = [
        package
        for package in pip_packages
        if requirement_name(package) not in names or requirement_name(package) in own
    ]
    return tuple(dict.fromkeys([*(dependency.line for dependency in added), *kept]))

"""The project name a pip requirement names, by packaging's rules: the one parser the config, the locks and
render share."""

from __future__ import annotations

import operator
import re
from functools import cache

# A name alone, or pinned by release numbers (torch==2.9.0, tqdm>=4.6,<5): the shape of nearly every requirement a
# render reads (the matrix's recipe packages, a target's pip_packages, a project's requirements), which packaging
# would read as written. Read here, it spares every render the import of packaging (a sixth of a render after a
# lock changed: issue 42); any other shape (extras, markers, ~=, wildcards, local or pre-releases, URLs) goes to
# packaging.
_COMPARE = {
    "==": operator.eq,
    "!=": operator.ne,
    ">=": operator.ge,
    "<=": operator.le,
    "<": operator.lt,
    ">": operator.gt,
}
_OPERATOR = "|".join(_COMPARE)
_NUMBER = r"[0-9]+(?:\.[0-9]+)*"
_RELEASE = rf"(?:{_OPERATOR}){_NUMBER}"
# Patterns as text, compiled by re where first used (and kept in its cache): a command that reads no requirement
# compiles none at import (issue 42). The same holds for the other modules a render or an experiment imports.
_PLAIN = rf"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(?:{_RELEASE}(?:,{_RELEASE})*)?"
_PIN = rf"({_OPERATOR})({_NUMBER})"
_SEPARATORS = r"[-_.]+"
# PEP 440's rule that ~= takes a release of two parts or more (~=1.2): packaging's message for ~=1 names no rule.
_ONE_PART_COMPATIBLE = r"~=\s*[0-9]+(?![0-9.])"


def plain_requirement(requirement: str) -> tuple[str, str] | None:
    """(normalised name, specifier) of a requirement of the plain shape, as packaging gives them, else None."""
    match = re.fullmatch(_PLAIN, requirement)
    if match is None:
        return None
    pins = requirement[match.end(1) :].split(",")
    # packaging.utils.canonicalize_name's rule; a SpecifierSet writes its specifiers sorted, each once.
    return re.sub(_SEPARATORS, "-", match.group(1)).lower(), ",".join(sorted(set(filter(None, pins))))


@cache
def requirement_name(requirement: str) -> str:
    """The normalised name (PEP 503) of a requirement (PEP 508) such as ``torch_xla[tpu]==2.9.0``, or of a bare name."""
    plain = plain_requirement(requirement)
    if plain:
        return plain[0]
    from packaging.requirements import Requirement  # imported here: loading the config needs no parser
    from packaging.utils import canonicalize_name

    return canonicalize_name(Requirement(requirement).name)


def unreadable(requirement: str) -> str | None:
    """Why packaging cannot read ``requirement`` (PEP 508), in one line, or None where it can: envkit.yaml's schema
    checks a requirement's characters and operators, not PEP 440's rules (~=1, 1.*.2, ~=1.0.*)."""
    if plain_requirement(requirement):
        return None  # read without packaging, as requirement_name reads it
    from packaging.requirements import InvalidRequirement

    try:
        requirement_name(requirement)
    except InvalidRequirement as exc:
        if re.search(_ONE_PART_COMPATIBLE, requirement):
            return "~= needs two release parts or more, such as ~=1.2"
        return str(exc).splitlines()[0]  # packaging's message goes on with the line and a caret under it
    return None


def allows(specifier: str, version: str) -> bool:
    """Whether ``specifier`` (such as ">=1.26,<3") allows ``version``, pre-releases included, as packaging's
    SpecifierSet says: read here for a final release and release-number pins, where PEP 440 compares the release
    numbers padded with zeros."""
    pins = [re.fullmatch(_PIN, pin) for pin in specifier.split(",")] if specifier else []
    if not re.fullmatch(_NUMBER, version) or not all(pins):
        from packaging.specifiers import SpecifierSet

        return SpecifierSet(specifier).contains(version, prereleases=True)
    return all(_COMPARE[pin.group(1)](*_padded(version, pin.group(2))) for pin in pins)


def _padded(*versions: str) -> list[tuple[int, ...]]:
    releases = [tuple(map(int, version.split("."))) for version in versions]
    width = max(map(len, releases))
    return [release + (0,) * (width - len(release)) for release in releases]

"""The project name a pip requirement names, by packaging's rules: the one parser the config, the locks and
render share."""

from __future__ import annotations

from functools import cache


@cache
def requirement_name(requirement: str) -> str:
    """The normalised name (PEP 503) of a requirement (PEP 508) such as ``torch_xla[tpu]==2.9.0``, or of a bare name."""
    from packaging.requirements import Requirement  # imported here: loading the config needs no parser
    from packaging.utils import canonicalize_name

    return canonicalize_name(Requirement(requirement).name)

"""YAML for the engines that take it (Kubernetes manifests, SkyPilot tasks): PyYAML's safe emitter, never text
templates, so a value is always one scalar."""

from __future__ import annotations

from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """safe_dump's emitter, with multi-line strings (scripts) as literal blocks."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _string)


def dump(document: dict[str, Any]) -> str:
    return yaml.dump(
        document, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000, allow_unicode=False
    )

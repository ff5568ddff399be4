"""What envkit accepts as a registry, an image reference and a tag: one check for push and launch.

A value that a registry or the engine would refuse only later, on another machine (a launch
job that fails to pull), is refused here, before anything is submitted, with the form expected.
"""

from __future__ import annotations

import re

from envkit.errors import EnvkitError

# HOST[:PORT][/PATH], lowercase: the part `envkit push` puts before envkit-<target>.
REGISTRY = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# Docker's reference grammar: [DOMAIN[:PORT]/]PATH[:TAG][@sha256:DIGEST].
_DOMAIN = r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]{1,5})?"
_PATH = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
REFERENCE = re.compile(
    rf"^({_DOMAIN}/)?{_PATH}(/{_PATH})*(:[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?(@sha256:[0-9a-f]{{64}})?$"
)


def check_registry(registry: str) -> str:
    if not REGISTRY.match(registry):
        raise EnvkitError(
            f"--registry '{registry}' is not valid: give HOST[:PORT][/PATH] in lowercase, "
            f"e.g. registry.example.com:5000/team"
        )
    return registry


def check_tag(tag: str) -> str:
    if not TAG.match(tag):
        raise EnvkitError(
            f"--tag '{tag}' is not valid: letters, digits, '_', '.' and '-', at most 128, not starting with '.' or '-'"
        )
    return tag


def check_reference(reference: str) -> str:
    if len(reference) > 255 or not REFERENCE.match(reference):
        raise EnvkitError(
            f"image '{reference}' is not a valid reference: give [REGISTRY/]NAME[:TAG][@sha256:DIGEST], "
            f"e.g. registry.example.com/team/envkit-cuda:latest"
        )
    return reference

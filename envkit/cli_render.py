"""Placeholder until the render commands land."""


def register(subparsers) -> None:
    pass

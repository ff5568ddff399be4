"""Placeholder until the docker commands land."""


def register(subparsers) -> None:
    pass

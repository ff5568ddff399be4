"""Placeholder until the report commands land."""


def register(subparsers) -> None:
    pass

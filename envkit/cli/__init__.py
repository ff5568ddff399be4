"""Command-line entry point: one parser, subcommands registered by area modules.

Each area module exposes ``register(subparsers)`` and sets ``func`` to its
``cmd_<command>`` handler; ``--config`` comes from envkit.cli.options.add_config.
Every command loads every area to register it, so an area's top level imports
only what render loads anyway; heavy imports (docker, matplotlib, jsonschema)
happen inside the handlers, which keeps ``envkit render`` fast and ``envkit
--help`` working without the optional extras.
"""

from __future__ import annotations

import argparse
import sys

from envkit import __version__
from envkit.errors import EnvkitError


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints the whole usage on error; our users get one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    from envkit.cli import images as cli_docker
    from envkit.cli import experiment as cli_experiment
    from envkit.cli import launch as cli_launch
    from envkit.cli import lock as cli_lock
    from envkit.cli import notebook as cli_notebook
    from envkit.cli import render as cli_render
    from envkit.cli import report as cli_report
    from envkit.cli import verify as cli_verify

    parser = _OneLineParser(
        prog="envkit",
        description="Render, build, run and compare pinned deep-learning images for cpu, cuda and tpu-vm.",
    )
    parser.add_argument("--version", action="version", version=f"envkit {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_OneLineParser)
    subparsers.required = True
    for area in (cli_render, cli_docker, cli_experiment, cli_report, cli_launch, cli_lock, cli_verify, cli_notebook):
        area.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except EnvkitError as exc:
        print(f"envkit: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("envkit: interrupted", file=sys.stderr)
        return 130

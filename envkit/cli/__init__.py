"""Command-line entry point: one parser, subcommands registered by area modules.

Each area module exposes ``register(subparsers)`` and sets ``func`` to its
``cmd_<command>`` handler; ``--config`` comes from envkit.cli.options.add_config.
One rule for every command line: envkit's options may stand anywhere, and a command
that runs a recipe (experiment, run, launch) takes the recipe's arguments after '--'
(envkit.cli.options.add_recipe_args), so `--dry-run` at the end is envkit's.
Every command loads every area to register it, so an area's top level imports
only what render loads anyway; heavy imports (docker, matplotlib, jsonschema)
happen inside the handlers, which keeps ``envkit render`` fast and ``envkit
--help`` working without the optional extras.
"""

from __future__ import annotations

import argparse
import shlex
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
    from envkit.cli import render as cli_render
    from envkit.cli import report as cli_report
    from envkit.cli import verify as cli_verify

    parser = _OneLineParser(
        prog="envkit",
        description="Render, build, run and compare pinned deep-learning images for cpu, cuda and tpu-vm.",
        epilog="envkit's options may stand anywhere on the command line; experiment, run and launch take the "
               "recipe's arguments after '--' (envkit experiment cpu-mnist --dry-run -- --epochs 1). --dry-run, "
               "where a command has it (experiment, launch, compare, demo, prune), prints exactly what would run "
               "and builds, pushes or runs nothing; make's DRY_RUN=1 does the same for every make target.",
    )
    parser.add_argument("--version", action="version", version=f"envkit {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_OneLineParser)
    subparsers.required = True
    for area in (cli_render, cli_docker, cli_experiment, cli_report, cli_launch, cli_lock, cli_verify):
        area.register(subparsers)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The arguments, with everything after the first '--' as the recipe's (for the commands that run one)."""
    from envkit.cli.options import RECIPE_ARGS_HINT

    split = argv.index("--") if "--" in argv else len(argv)
    args, unknown = parser.parse_known_args(argv[:split])
    takes_recipe_args = hasattr(args, "recipe_args")
    if takes_recipe_args:
        unknown = [*args.recipe_args, *unknown]  # words before '--' that are not envkit's
        args.recipe_args = argv[split + 1:]
    if unknown:
        hint = ""
        if takes_recipe_args:
            known = list(argv[:split])
            for word in unknown:
                known.remove(word)
            hint = f"; {RECIPE_ARGS_HINT}: {shlex.join(['envkit', *known, '--', *unknown])}"
        parser.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    if split < len(argv) and not takes_recipe_args:
        parser.error(f"'--' passes arguments to a recipe, and {args.command} runs none (experiment, run and launch do)")
    return args


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse(parser, list(sys.argv[1:] if argv is None else argv))
    try:
        return int(args.func(args) or 0)
    except EnvkitError as exc:
        print(f"envkit: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("envkit: interrupted", file=sys.stderr)
        return 130

"""Command-line options that several areas share, each defined once."""

from __future__ import annotations

import argparse
from pathlib import Path

from envkit.project.config import DEFAULT_CONFIG


def add_config(parser: argparse.ArgumentParser) -> None:
    """``--config FILE``, for every command that reads the project config."""
    parser.add_argument(
        "--config", metavar="FILE", type=Path, default=DEFAULT_CONFIG, help=f"project config (default: ./{DEFAULT_CONFIG})"
    )


RECIPE_ARGS_HINT = "recipe arguments follow '--'"


def add_recipe_args(parser: argparse.ArgumentParser) -> None:
    """The recipe's arguments: whatever follows '--' (envkit.cli.parse puts them here), so envkit's own
    options, --dry-run included, may stand anywhere before it."""
    parser.add_argument("recipe_args", nargs="*", metavar="-- RECIPE_ARG",
                        help=f"{RECIPE_ARGS_HINT}, e.g. -- --epochs 1; they come after the ones envkit passes")


def load_target(args: argparse.Namespace):
    """The config named by ``--config`` and its target named by the ``target`` argument."""
    from envkit.project.config import load_config

    config = load_config(args.config)
    return config, config.target(args.target)

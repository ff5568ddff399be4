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


def load_target(args: argparse.Namespace):
    """The config named by ``--config`` and its image target named by the ``target`` argument."""
    from envkit.errors import EnvkitError
    from envkit.project.config import load_config

    config = load_config(args.config)
    target = config.target(args.target)
    if target.is_notebook:
        raise EnvkitError(f"target {target.name} is a notebook target ({target.platform} {target.accelerator}): it has no "
                          f"image; render its notebooks with envkit notebook EXPERIMENT --target {target.name}")
    return config, target

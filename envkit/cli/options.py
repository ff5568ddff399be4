"""Command-line options that several commands share, each defined once: the config, the build options."""

from __future__ import annotations

import argparse
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.image import BUILDERS
from envkit.project import DEFAULT_CONFIG


def directory_option(text: str) -> Path:
    """A directory option's value: an empty one (an unset make or shell variable) is refused, not taken as '.'."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path: give a directory ('.' for this one)")
    return Path(text)


def add_config(parser: argparse.ArgumentParser) -> None:
    """``--config FILE``, for every command that reads the project config."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        type=Path,
        default=DEFAULT_CONFIG,
        help=f"project config (default: ./{DEFAULT_CONFIG})",
    )


class Once(argparse.Action):
    """A one-valued option given twice with two values is refused in one line: never the last taken silently."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        given = getattr(namespace, self.dest, None)
        if given is not None and given != values:
            from envkit.errors import EnvkitError

            raise EnvkitError(f"{option_string} given twice ({given}, {values}): give one, and one command per value")
        setattr(namespace, self.dest, values)


def add_target(parser, help: str, **kwargs) -> None:
    """``--target NAME``, one target: given twice, one line (lock takes several: its own option)."""
    parser.add_argument("--target", metavar="NAME", action=Once, help=help, **kwargs)


RECIPE_ARGS_HINT = "recipe arguments follow '--'"


def add_recipe_args(parser: argparse.ArgumentParser) -> None:
    """The recipe's arguments: whatever follows '--' (envkit.cli.parse puts them here), so envkit's own
    options, --dry-run included, may stand anywhere before it."""
    parser.add_argument(
        "recipe_args",
        nargs="*",
        metavar="-- RECIPE_ARG",
        help=f"{RECIPE_ARGS_HINT}, e.g. -- --epochs 1; they come after the ones envkit passes",
    )


def load_target(args: argparse.Namespace):
    """The config named by ``--config`` and its image target named by the ``target`` argument."""
    return load_image_target(args.config, args.target)


def load_image_target(config_path: Path, name: str):
    """The config at ``config_path`` and its image target ``name`` (a notebook target has no image: one line)."""
    from envkit.errors import EnvkitError
    from envkit.project.load import load_config

    config = load_config(config_path)
    target = config.target(name)
    if target.is_notebook:
        raise EnvkitError(
            f"target {target.name} is a notebook target ({target.platform} {target.accelerator}): it has no "
            f"image; render its notebooks with envkit notebook EXPERIMENT --target {target.name}"
        )
    return config, target


def add_build_inputs(parser, builder_default: str | None = BUILDERS[0]) -> None:
    """The options that change what a build contains (build, experiment, verify)."""
    parser.add_argument(
        "--builder",
        choices=BUILDERS,
        default=builder_default,
        help=f"what builds the image (default: {builder_default or 'the one that built the current image'}); "
        "buildah gives identical digests on rebuild and moves its image into the Docker engine",
    )
    parser.add_argument("--base-image", help="override the BASE_IMAGE build arg")
    parser.add_argument(
        "--wheelhouse", type=Path, help="install only from the *.whl files in this directory (air-gapped hosts)"
    )
    parser.add_argument(
        "--ca-cert",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="extra CA certificate (PEM) to trust inside the image; repeatable",
    )
    parser.add_argument(
        "--build-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra docker build arg; repeatable. PIP_INDEX_URL with credentials reaches the build as the build secret "
        "pip_index_url (its ARG gets the URL without them); any other value holding a secret is refused",
    )


def add_build_options(parser) -> None:
    """The options of `envkit build`, which `envkit experiment` passes on to it."""
    parser.add_argument("--no-cache", action="store_true", help="rebuild every layer")
    parser.add_argument(
        "--platform",
        metavar="OS/ARCH",
        help="the platform to build for, one the target lists (envkit.yaml platforms; default: the engine's own); "
        "another architecture than the engine's runs emulated",
    )
    add_build_inputs(parser)


def build_options(args, *, no_cache: bool):
    from envkit.image.build_context import BuildOptions, parse_build_arg
    from envkit.project.load import load_config

    config = load_config(args.config)
    return BuildOptions(
        no_cache=no_cache,
        base_image=args.base_image,
        wheelhouse=args.wheelhouse,
        ca_certs=tuple(args.ca_cert),
        build_args=dict(parse_build_arg(a) for a in args.build_arg),
        builder=args.builder or BUILDERS[0],
        platform=getattr(args, "platform", None),
        files_limit_mb=config.files_limit_mb,
        include_secrets=config.include_secrets,
        output=config.output,
    )


def build_options_argv(args) -> tuple[str, ...]:
    """Parsed build options back as `envkit build` arguments."""
    argv = ("--no-cache",) if args.no_cache else ()
    argv += ("--builder", args.builder) if args.builder != BUILDERS[0] else ()
    argv += ("--platform", args.platform) if getattr(args, "platform", None) else ()
    argv += ("--base-image", args.base_image) if args.base_image else ()
    argv += ("--wheelhouse", str(args.wheelhouse)) if args.wheelhouse else ()
    for cert in args.ca_cert:
        argv += ("--ca-cert", str(cert))
    for build_arg in args.build_arg:
        # imported here: build_context is 10-60 ms of imports a command without --build-arg does not need
        from envkit.image.build_context import INDEX_ARG, INDEX_SECRET_ENV, credentials, parse_build_arg

        key, value = parse_build_arg(build_arg)
        why = credentials(value)
        if why:
            instead = (
                f"set {INDEX_SECRET_ENV} to that URL" if key == INDEX_ARG else "give it to the program at run time"
            )
            raise EnvkitError(
                f"--build-arg {key} {why}, which the `envkit build` this command runs and prints would carry on its "
                f"command line: {instead} instead"
            )
        argv += ("--build-arg", build_arg)
    return argv


def print_table(rows: list[tuple[str, ...]]) -> None:
    """Rows as columns padded to their widest cell (the first row the header), as `targets` and `matrix` print."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())

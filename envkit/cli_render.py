"""`envkit targets`, `envkit matrix` and `envkit render`.

Imports only the config, matrix and render modules: this path must stay free of
torch, docker and matplotlib so that the CLI starts fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envkit.cli_options import add_config


def register(subparsers) -> None:
    targets = subparsers.add_parser(
        "targets",
        help="list the configured targets and their pins",
        description="List each target in the config with its kind, base image and pinned versions.",
    )
    add_config(targets)
    targets.set_defaults(func=cmd_targets)

    matrix = subparsers.add_parser(
        "matrix",
        help="list the supported torch / CUDA / torch_xla combinations",
        description="Print envkit's compatibility matrix (envkit/data/matrix.yaml): what a config may combine.",
    )
    matrix.set_defaults(func=cmd_matrix)

    render = subparsers.add_parser(
        "render",
        help="render docker/<target>/ (Dockerfile, run.sh, .dockerignore)",
        description="Render each target's Dockerfile, run.sh and .dockerignore from templates/. Output is "
        "byte-identical on every run and machine; all files are written or none.",
    )
    add_config(render)
    which = render.add_mutually_exclusive_group(required=True)
    which.add_argument("--target", metavar="NAME", help="render one target")
    which.add_argument("--all", action="store_true", help="render every target in the config")
    output = render.add_mutually_exclusive_group()
    output.add_argument("--stdout", action="store_true", help="print the files instead of writing them")
    output.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the files under --output are stale"
    )
    render.add_argument("--output", metavar="DIR", type=Path, help="output directory (default: docker/ beside the config)")
    render.set_defaults(func=cmd_render)


def cmd_targets(args: argparse.Namespace) -> int:
    from envkit.config import load_config

    config = load_config(args.config)
    rows = [("TARGET", "KIND", "BASE IMAGE", "PINS")]
    for target in config.targets.values():
        pins = " ".join(f"{name}={version}" for name, version in target.pins().items())
        rows.append((target.name, target.kind, target.base_image, pins))
    _print_table(rows)
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    from envkit.matrix import load_matrix, version_key

    matrix = load_matrix()
    rows = [("TORCH", "TORCHVISION", "PYTHON", "CUDA VARIANTS (first = default)", "TPU-VM: TORCH_XLA / LIBTPU / PYTHON")]
    for minor in sorted(matrix.torch, key=version_key):
        release = matrix.torch[minor]
        cuda = ", ".join(f"{variant} ({matrix.cuda[variant].cuda})" for variant in release.cuda_variants) or "-"
        tpu = matrix.tpu.get(minor)
        tpu_text = f"{minor}.x / {tpu.libtpu_package} {tpu.libtpu} / {'-'.join(tpu.python)}" if tpu else "-"
        rows.append((f"{minor}.x", f"{release.torchvision}.x", "-".join(release.python), cuda, tpu_text))
    _print_table(rows)
    print(f"\ncpu wheels: {matrix.cpu_index_url}; torch_xla == torch; torchvision's patch release equals torch's.")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from envkit import render
    from envkit.config import load_config
    from envkit.errors import EnvkitError

    config = load_config(args.config)
    names = list(config.targets) if args.all else [config.target(args.target).name]
    files = render.render(config, names)
    output = args.output if args.output is not None else config.root / render.DEFAULT_OUTPUT
    if args.stdout:
        for file in files:
            sys.stdout.write(f"==> {file.path.as_posix()} <==\n{file.text}")
        return 0
    if args.check:
        problems = render.stale(output, files) + (render.orphans(output, names) if args.all else [])
        if problems:
            summary = "; ".join(problems)
            raise EnvkitError(f"rendered files are stale: {summary}; run `envkit render --all` and commit", exit_code=1)
        print(f"{len(files)} files under {output} are up to date")
        return 0
    written = render.write(output, files)
    print(f"rendered {len(files)} files for {', '.join(names)} into {output} ({len(written)} changed)")
    return 0


def _print_table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())

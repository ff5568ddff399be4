"""`envkit build|run|push|save|load|prune`: images through the Docker engine.

Heavy work lives in envkit.image (build context, build, archive, prune); this module
only parses arguments and prints results (results on stdout, progress on stderr).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from envkit.cli.options import (
    add_build_options,
    add_config,
    add_recipe_args,
    build_options,
    directory_option,
    load_target,
)
from envkit.support.provenance_records import RESULTS_FOLDER


def register(subparsers) -> None:
    build = subparsers.add_parser(
        "build", help="build a target's image (tag: envkit-<target>:<context hash> and latest)"
    )
    build.add_argument("target", help="target name from the config, e.g. cpu")
    add_build_options(build)
    add_config(build)
    build.set_defaults(func=cmd_build)

    run = subparsers.add_parser(
        "run",
        help="run a recipe or a Python script of the project in a target's image through docker/<target>/run.sh",
        description="envkit's options (--config, --tag, --gpus, --results-dir, --data-dir) may stand anywhere; "
        "the script's follow '--', e.g. envkit run cpu train.py -- --epochs 1, or envkit run cpu mnist "
        "(recipes/mnist.py). An experiment of envkit.yaml runs with envkit experiment NAME.",
    )
    run.add_argument("target")
    run.add_argument(
        "recipe", metavar="SCRIPT", help="a Python script's path in the project (train.py) or a recipe's name (mnist)"
    )
    add_recipe_args(run)
    run.add_argument("--tag", help="image tag to run (default: latest)")
    run.add_argument("--gpus", help="comma-separated host GPU indices or 'all' (cuda targets)")
    run.add_argument("--results-dir", type=directory_option, default=Path(RESULTS_FOLDER))
    run.add_argument("--data-dir", type=directory_option, default=Path("data"))
    run.add_argument(
        "--dry-run", action="store_true", help="print the run.sh line it would run; check, create and run nothing"
    )
    add_config(run)
    run.set_defaults(func=cmd_run)

    push = subparsers.add_parser(
        "push",
        help="tag a target's image for a registry, push it, and record its digest in docker/<target>/pushed.json",
        description="Push a target's image under its content tag and latest, and record the digest the registry "
        "answered in docker/<target>/pushed.json. A target of several platforms (envkit.yaml platforms) whose "
        "engine holds images of the same inputs for more than one (the others built with envkit build --platform) "
        "goes as one manifest list (buildah), so each architecture pulls its own image by one digest.",
    )
    push.add_argument("target")
    push.add_argument("--registry", required=True, help="HOST[:PORT][/PATH]")
    push.add_argument("--tag", help="image tag to push (default: latest)")
    add_config(push)
    push.set_defaults(func=cmd_push)

    save = subparsers.add_parser("save", help="write a target's image as .tar.gz plus a .manifest.json")
    save.add_argument("target")
    save.add_argument("--tag", help="image tag to save (default: latest)")
    save.add_argument("--output-dir", type=Path, default=Path("images"))
    add_config(save)
    save.set_defaults(func=cmd_save)

    load = subparsers.add_parser("load", help="verify an image tarball against its manifest, then load it")
    load.add_argument("file", type=Path, help="the .tar.gz or its .manifest.json")
    load.set_defaults(func=cmd_load)

    prune = subparsers.add_parser(
        "prune",
        help="remove a target's superseded images (never latest)",
        description="Every build of new content adds an envkit-<target>:<hash> image that nothing else removes. "
        "prune removes all of them but latest (and, with --keep N, the N newest others); "
        "an image with other names (e.g. from push) only loses envkit's name.",
    )
    prune.add_argument("target")
    prune.add_argument(
        "--keep", type=_count, default=0, metavar="N", help="also keep the N newest older images (default 0)"
    )
    prune.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    add_config(prune)
    prune.set_defaults(func=cmd_prune)


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"'{text}' is not a count: give a whole number, 0 or more")
    return int(text)


def cmd_build(args: argparse.Namespace) -> int:
    from envkit.image.build import build

    config, target = load_target(args)
    built = build(config.root, target, build_options(args, no_cache=args.no_cache))
    state = "is already built; tagged it latest" if built.reused else "built and tagged latest"
    digest = f", digest {built.digest}" if built.digest else ""
    print(f"envkit: {built.tag} {state} in {built.where} ({built.size_bytes / 1e9:.2f} GB{digest})", file=sys.stderr)
    print(built.tag)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from envkit.host.container import run_recipe

    config, target = load_target(args)
    return run_recipe(
        config,
        target,
        args.recipe,
        args.recipe_args,
        tag=args.tag,
        gpus=args.gpus,
        results_dir=args.results_dir,
        data_dir=args.data_dir,
        dry_run=args.dry_run,
    )


def cmd_push(args: argparse.Namespace) -> int:
    from envkit.image.build import push
    from envkit.image.pushed import record

    config, target = load_target(args)
    pushed = push(target, args.registry, args.tag, progress=lambda s: print(s, file=sys.stderr))
    path = record(config.output.image_folder(config.root, target.name), target.name, pushed)
    for each in pushed:
        print(f"{each.repository}:{each.tag}")
    # Both tags name one manifest: the reference `envkit launch --registry` runs.
    print(pushed[-1].reference)
    print(
        f"envkit: recorded {pushed[-1].digest} in {path}: commit it, and envkit launch --registry "
        f"{args.registry} runs this image by digest",
        file=sys.stderr,
    )
    return 0


def cmd_save(args: argparse.Namespace) -> int:
    from envkit.image.archive import save

    _, target = load_target(args)
    tarball, manifest = save(target, args.tag, args.output_dir)
    print(tarball)
    print(manifest)
    return 0


def cmd_load(args: argparse.Namespace) -> int:
    from envkit.image.archive import load

    print(load(args.file))
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    from envkit.image import prune
    from envkit.image.build import LATEST, repository

    _, target = load_target(args)
    repo = repository(target.name)
    removed = 0
    for outcome in prune.prune(target.name, args.keep, args.dry_run):
        image = outcome.image
        built = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(image.created))
        if outcome.state == prune.KEPT:
            print(f"envkit: warning: kept {image.label}: {outcome.detail}", file=sys.stderr)
            continue
        removed += 1
        still = f"; still named {outcome.detail}" if outcome.detail else ""
        print(f"{outcome.state} {image.label} ({image.size_bytes / 1e9:.2f} GB, built {built}{still})")
    if args.dry_run:
        print(f"envkit: dry run: {removed} old {repo} image(s) would be removed; nothing was", file=sys.stderr)
    elif removed:
        # Sizes overlap: layers shared with the images kept stay on disk.
        print(f"envkit: removed {removed} old {repo} image(s); {repo}:{LATEST} is kept", file=sys.stderr)
    else:
        print(f"envkit: no old {repo} images to remove", file=sys.stderr)
    return 0

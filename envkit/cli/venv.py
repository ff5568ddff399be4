"""`envkit venv`: a target's lock, or a host environment's (requirements/<name>.lock), as a host virtual environment."""

from __future__ import annotations

import argparse
from pathlib import Path

from envkit.cli.options import add_config
from envkit.errors import EnvkitError


def register(subparsers) -> None:
    venv = subparsers.add_parser(
        "venv",
        help="make a target's lock a virtual environment on this host, every file hash-checked",
        description="Make a virtual environment on this host from a target's docker/<target>/requirements.lock, "
        "or a host environment's requirements/<name>.lock (--requirements requirements/<name>.in), with the lock's "
        "Python, installing exactly the lock's files by sha256. The venv records the lock's sha256 "
        "(envkit-lock.json), so recipe results run with it name their lock. A venv already at --path is "
        "replaced only when envkit made it (its envkit-venv.txt) and it holds nothing but a venv's files (a venv "
        "made by hand, or one holding src/, .git or train.py, is refused in one line and left as it was); it is set "
        "aside and comes back if the new one fails. A host environment that has no lock here gets its pins, "
        "unlocked, and says so.",
    )
    add_config(venv)
    which = venv.add_mutually_exclusive_group(required=True)
    which.add_argument("target", nargs="?", help="the target whose lock to install")
    which.add_argument(
        "--requirements",
        metavar="FILE.in",
        type=Path,
        help="a host environment instead: its lock FILE.lock beside it (e.g. requirements/xla.in)",
    )
    venv.add_argument(
        "--path",
        metavar="DIR",
        type=Path,
        help="the venv to make (default: .venv-<target> beside the config, or .venv-<name> for requirements/<name>.in)",
    )
    venv.add_argument(
        "--torch-index-url",
        metavar="URL",
        help="a mirror of the target's PyTorch index (torch, "
        "torchvision), as for envkit lock; default: the matrix's index",
    )
    from envkit.host.venv import add_arguments

    add_arguments(venv)
    venv.set_defaults(func=cmd_venv)


def cmd_venv(args: argparse.Namespace) -> int:
    from envkit.host.venv import describe, make_venv

    if args.requirements is not None:
        lock_path, sources, default_path = _requirements_lock(args)
        if lock_path is None:
            return _unlocked(args, sources, args.path or default_path)
    else:
        lock_path, sources, default_path = _target_lock(args)
    made = make_venv(
        lock_path, args.path or default_path, python=args.python, sources=sources, installer=args.installer
    )
    print(describe(made, lock_path))
    return 0


def _requirements_lock(args: argparse.Namespace):
    """(its fresh lock or None when there is none, where files come from, default venv path) of a host environment."""
    from envkit.host.venv import Sources
    from envkit.lock.inputs import requirements_inputs
    from envkit.lock.lockfile import read_lock, requirements_lock_path
    from envkit.render.target_files import project_pages

    inputs = requirements_inputs(args.requirements)
    lock_path = requirements_lock_path(args.requirements)
    lock = read_lock(lock_path)
    if lock is not None and lock.inputs_sha256 != inputs.digest():
        raise EnvkitError(
            f"{lock_path} is stale ({args.requirements} changed since it was locked); "
            f"run `envkit lock --requirements {args.requirements}`"
        )
    torch_index = inputs.torch_index_for(args.torch_index_url)
    names = [r for r in inputs.requirements if "+" in r]
    sources = Sources(None, tuple(project_pages(torch_index, names)) if torch_index else ())
    default_path = Path(f".venv-{args.requirements.stem}")
    return (lock_path if lock is not None else None), sources, default_path


def _unlocked(args: argparse.Namespace, sources, path: Path) -> int:

    from envkit.host.venv import make_unlocked_venv
    from envkit.lock.host_platforms import this_platform
    from envkit.lock.inputs import requirements_inputs
    from envkit.lock.lockfile import UNIVERSAL, requirements_lock_path

    if args.installer == "uv":
        raise EnvkitError("--installer uv installs locks; an environment without a lock is resolved by pip")
    inputs = requirements_inputs(args.requirements)
    here = this_platform()
    if here not in inputs.platform.removeprefix(UNIVERSAL).split():
        raise EnvkitError(
            f"{args.requirements} does not run on {here}: it serves {inputs.platform.removeprefix(UNIVERSAL)} "
            "(its `# platforms:` line)"
        )
    lock_path = requirements_lock_path(args.requirements)
    because = (
        f"{lock_path} does not exist (`envkit lock --requirements {args.requirements}` makes it where "
        "its indexes answer)"
    )
    version = make_unlocked_venv(
        args.requirements,
        tuple(inputs.python.split()),
        path,
        unlocked_because=because,
        python=args.python,
        sources=sources,
    )
    print(f"made {path} from the pins of {args.requirements} (unlocked: its runs record no lock) with Python {version}")
    return 0


def _target_lock(args: argparse.Namespace):
    """(lock, where its files come from, default venv path) of a target that is locked and fresh."""
    from envkit.host.venv import Sources
    from envkit.lock.inputs import lock_inputs
    from envkit.lock.lockfile import lock_path, read_lock
    from envkit.project.load import load_config
    from envkit.render.target_files import torch_find_links

    config = load_config(args.config)
    target = config.target(args.target)
    path = lock_path(config, target.name)
    lock = read_lock(path)
    relative = path.relative_to(config.root)
    if lock is None:
        raise EnvkitError(
            f"target {target.name} is unlocked: {relative} does not exist; lock it with "
            f"`envkit lock --target {target.name}` where its indexes answer"
        )
    inputs = lock_inputs(target)
    if lock.inputs_sha256 != inputs.digest():
        raise EnvkitError(
            f"target {target.name}: {relative} is stale (envkit.yaml changed since it was locked); "
            f"run `envkit lock --target {target.name}`"
        )
    # find_links may name paths inside the image: only URLs and what exists here reach the host's installer.
    links = [link for link in target.find_links if "://" in link or Path(link).exists()]
    sources = Sources(target.pip_index_url, tuple(torch_find_links(target, inputs, args.torch_index_url) + links))
    return path, sources, config.root / f".venv-{target.name}"

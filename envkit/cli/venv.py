"""`envkit venv`: a target's lock (or any envkit lock) as a host virtual environment (envkit/host/venv.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from envkit.cli.options import add_config
from envkit.errors import EnvkitError


def register(subparsers) -> None:
    venv = subparsers.add_parser(
        "venv",
        help="make a target's lock a virtual environment on this host, every file hash-checked",
        description="Make a virtual environment on this host from a target's docker/<target>/requirements.lock "
        "(or --lock FILE), with the lock's Python, installing exactly the lock's files by sha256. The venv "
        "records the lock's sha256 (envkit-lock.json), so recipe results run with it name their lock. A venv "
        "already at --path is replaced only once the new one is complete.",
    )
    add_config(venv)
    which = venv.add_mutually_exclusive_group(required=True)
    which.add_argument("target", nargs="?", help="the target whose lock to install")
    which.add_argument("--lock", metavar="FILE", type=Path, help="an envkit lock file instead (e.g. requirements/xla.lock)")
    venv.add_argument("--path", metavar="DIR", type=Path, help="the venv to make (default: .venv-<target> beside the "
                      "config, or .venv-<lock's stem>)")
    venv.add_argument("--torch-index-url", metavar="URL", help="a mirror of the target's PyTorch index (torch, "
                      "torchvision), as for envkit lock; default: the matrix's index")
    from envkit.host.venv import add_arguments

    add_arguments(venv)
    venv.set_defaults(func=cmd_venv)


def cmd_venv(args: argparse.Namespace) -> int:
    from envkit.host.venv import Sources, describe, make_venv

    if args.lock is not None:
        if args.torch_index_url:
            raise EnvkitError("--torch-index-url applies to a target's lock; a --lock file names no PyTorch index")
        lock_path, sources = args.lock, Sources()
        path = args.path or Path(f".venv-{args.lock.stem}")
    else:
        lock_path, sources, default_path = _target_lock(args)
        path = args.path or default_path
    made = make_venv(lock_path, path, python=args.python, sources=sources, installer=args.installer)
    print(describe(made, lock_path))
    return 0


def _target_lock(args: argparse.Namespace):
    """(lock, where its files come from, default venv path) of a target that is locked and fresh."""
    from envkit.host.venv import Sources
    from envkit.lock.lockfile import lock_inputs, lock_path, read_lock
    from envkit.project.config import load_config
    from envkit.render.target_files import torch_find_links

    config = load_config(args.config)
    target = config.target(args.target)
    path = lock_path(config, target.name)
    lock = read_lock(path)
    relative = path.relative_to(config.root)
    if lock is None:
        raise EnvkitError(f"target {target.name} is unlocked: {relative} does not exist; lock it with "
                          f"`envkit lock --target {target.name}` where its indexes answer")
    if lock.inputs_sha256 != lock_inputs(target).digest():
        raise EnvkitError(f"target {target.name}: {relative} is stale (envkit.yaml changed since it was locked); "
                          f"run `envkit lock --target {target.name}`")
    # find_links may name paths inside the image: only URLs and what exists here reach the host's installer.
    links = [link for link in target.find_links if "://" in link or Path(link).exists()]
    sources = Sources(target.pip_index_url, tuple(torch_find_links(target, args.torch_index_url) + links))
    return path, sources, config.root / f".venv-{target.name}"

"""`envkit lock`: write and check docker/<target>/requirements.lock and the host environments' requirements/*.lock."""

from __future__ import annotations

import argparse
from pathlib import Path

from envkit.cli.options import add_config
from envkit.errors import EnvkitError


def register(subparsers) -> None:
    lock = subparsers.add_parser(
        "lock",
        help="pin every package of a target by version and sha256 (docker/<target>/requirements.lock)",
        description="Resolve each target's complete dependency set with uv for the target's platform "
        "(its base image's glibc, its Python, its architecture; one lock with markers per architecture, checked on "
        "each, for a target of several platforms) and write docker/<target>/requirements.lock. "
        "torch and torchvision come from PyTorch's index for cpu/cuda variants, everything else from "
        "the default index (or the target's pip_index_url). --check runs offline.",
    )
    add_config(lock)
    which = lock.add_mutually_exclusive_group()
    which.add_argument(
        "--target", metavar="NAME", action="append", help="lock (or --check) this target; repeatable, each honoured"
    )
    which.add_argument("--all", action="store_true", help="lock every target in the config")
    which.add_argument(
        "--requirements",
        metavar="FILE",
        type=Path,
        nargs="+",
        help="lock host environments instead: each requirements file (requirements/<name>.in, requirements.txt) "
        "into <name>.lock beside it (one universal lock for Linux x86-64 and aarch64 and macOS 14+ arm64 on Python "
        "3.11-3.13, checked on each, the default index; torch==X+cpu from PyTorch's CPU index), "
        "what make venv / xla-env / tpu-env / sky-env install",
    )
    mode = lock.add_mutually_exclusive_group()
    mode.add_argument(
        "--check",
        action="store_true",
        help="offline: one line per target (fresh, stale and why, or unlocked); exit 1 when a lock is stale "
        "(changed inputs, packages edited by hand, missing hashes, CUDA packages in cpu) or a target is unlocked "
        "without leave (unlocked: {allowed: REASON}, or --allow-unlocked); all targets unless --target",
    )
    mode.add_argument(
        "--upgrade-package",
        metavar="NAME",
        action="append",
        help="let this locked package move to its newest allowed version (repeatable); others stay as locked",
    )
    lock.add_argument(
        "--allow-unlocked",
        action="store_true",
        help="with --check: a target without a lock passes (a target may say so itself: unlocked: {allowed: REASON})",
    )
    lock.add_argument(
        "--torch-index-url",
        metavar="URL",
        help="a mirror of the target's PyTorch index (torch, torchvision); default: the matrix's index",
    )
    lock.set_defaults(func=cmd_lock)


def cmd_lock(args: argparse.Namespace) -> int:
    if args.requirements:
        return _lock_requirements(args)
    from envkit.project.load import load_config

    config = load_config(args.config)
    if args.target:
        names = [config.target(name).name for name in dict.fromkeys(args.target)]
    elif args.all or args.check:
        names = list(config.targets)
    else:
        raise EnvkitError("envkit lock: choose the targets: --target NAME or --all")
    if args.check:
        from envkit.lock.status import lock_status

        statuses = [lock_status(config, name) for name in names]
        allowed = {name: config.target(name).unlocked_allowed for name in names}
        if args.allow_unlocked:
            allowed = {name: "--allow-unlocked" for name in names}
        return _report(statuses, "--all", allowed)  # one stale lock is named with its own command
    from envkit.lock.resolve import lock_targets

    # The Dockerfile records the lock's sha256, so render follows: make re-renders by itself
    # (the lock is a prerequisite), `envkit build` refuses a Dockerfile older than its lock.
    return lock_targets(config, names, args.upgrade_package or [], args.torch_index_url)


def _lock_requirements(args: argparse.Namespace) -> int:
    if args.check:
        from envkit.lock.status import requirements_status

        statuses = [requirements_status(path) for path in args.requirements]
        return _report(statuses, "--requirements " + " ".join(status.target for status in statuses))
    from envkit.lock.resolve import lock_requirements

    return lock_requirements(args.requirements, args.upgrade_package or [], args.torch_index_url)


def _report(statuses, fix: str, allowed: dict[str, str | None] | None = None) -> int:
    """One line per lock, fresh ones included, then one error line for stale ones, as `envkit render --check` does,
    else for targets unlocked without leave (``allowed``: target -> why it may be, or None; None for host
    environments, whose absent lock is its own line)."""
    for status in statuses:
        leave = (allowed or {}).get(status.target) if status.state == "unlocked" else None
        print(status.line() + (f"; allowed: {leave}" if leave else ""))
    stale = [status for status in statuses if status.state == "stale"]
    if stale:
        command = stale[0].relock if len(stale) == 1 else f"envkit lock {fix}"
        raise EnvkitError(
            f"locks are stale ({', '.join(s.target for s in stale)}): run `{command}` and commit", exit_code=1
        )
    unlocked = [s.target for s in statuses if s.state == "unlocked" and allowed is not None and not allowed[s.target]]
    if unlocked:
        raise EnvkitError(
            f"unlocked: {', '.join(unlocked)}: run `envkit lock --target {unlocked[0]}` and commit, or give the target "
            "unlocked: {allowed: REASON} (envkit lock --check --allow-unlocked for this check)",
            exit_code=1,
        )
    return 0

"""`envkit targets`: the configured targets, their pins and locks."""

from __future__ import annotations

import argparse

from envkit.cli.options import add_config, print_table


def register(subparsers) -> None:
    targets = subparsers.add_parser(
        "targets",
        help="list the configured targets and their pins",
        description="List each target in the config with its kind, base image (a notebook target: the platform, "
        "accelerator and runtime it runs in), pinned versions and lock (locked or stale, with the first 12 hex of the "
        "lock's sha256, or unlocked); a stale lock's reason follows the table, as `envkit lock --check` gives it.",
    )
    add_config(targets)
    targets.set_defaults(func=cmd_targets)


def cmd_targets(args: argparse.Namespace) -> int:
    from envkit.lock.status import lock_status
    from envkit.project.load import load_config

    config = load_config(args.config)
    rows = [("TARGET", "KIND", "BASE IMAGE OR NOTEBOOK RUNTIME", "LOCK", "PINS")]
    stale = []
    for target in config.targets.values():
        pins = " ".join(f"{name}={version}" for name, version in target.pins().items())
        status = lock_status(config, target.name)
        lock = {"fresh": "locked", "stale": "stale"}.get(status.state, "unlocked")
        if status.lock is not None:
            lock += f" {status.lock.sha256[:12]}"
        if target.is_notebook:
            from envkit.project.notebook_platforms import where_it_runs

            base = where_it_runs(target)
        else:
            base = target.base_image
        rows.append((target.name, target.kind, base, lock, pins))
        stale += [status.line()] if status.state == "stale" else []
    print_table(rows)
    if stale:
        print()
        print("\n".join(stale))
    return 0

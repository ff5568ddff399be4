"""`envkit init`: make the repository here an envkit project (envkit.project.scaffold), writing every
file or none, and never over a file that exists."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers) -> None:
    init = subparsers.add_parser(
        "init",
        help="make this repository an envkit project: envkit.yaml, its experiments and a make include",
        description="Write envkit.yaml (the default targets at the torch your requirements name, your "
        "requirements wired into every lock, one experiment per entry script on every default target) and "
        "envkit.mk (make <experiment> [TARGET=cuda]), plus a Makefile that includes it where there is none. An existing file is "
        "never overwritten: init stops, naming it, and writes nothing.",
    )
    init.add_argument("--dir", type=Path, default=Path("."), help="the repository (default: here)")
    init.set_defaults(func=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    from envkit.errors import EnvkitError
    from envkit.project.files import in_work_tree
    from envkit.project.scaffold import MAKE_INCLUDE, scaffold
    from envkit.render.target_files import packaged_templates
    from envkit.support.atomic import write_text_atomic
    from envkit.support.bounded_load import load_text

    root = args.dir
    if not root.is_dir():
        raise EnvkitError(f"--dir {root}: not a directory")
    plan = scaffold(root, load_text(packaged_templates() / "init" / MAKE_INCLUDE))
    existing = [name for name in plan.files if (root / name).exists()]
    if existing:
        raise EnvkitError(
            f"{root / existing[0]} exists: envkit init never overwrites a file; edit it, or move it away and run init again"
        )
    for name, text in plan.files.items():
        write_text_atomic(root / name, text)
    print(f"envkit: wrote {', '.join(plan.files)} (torch {plan.torch})", file=sys.stderr)
    if plan.requirements is None:
        print(
            "envkit: no requirements.in, requirements.txt or pyproject dependencies found: add requirements: FILE",
            file=sys.stderr,
        )
    if "Makefile" not in plan.files:
        print(f"envkit: add `include {MAKE_INCLUDE}` to your Makefile for make <experiment>", file=sys.stderr)
    if not plan.scripts:
        print(
            'envkit: no entry script (a top-level *.py with if __name__ == "__main__"): add experiments to envkit.yaml',
            file=sys.stderr,
        )
    if not in_work_tree(root):
        print(
            "envkit: not a git repository: its images and notebooks will hold every file here less .dockerignore; "
            "in a git repository, only the files git tracks (git init, then commit)",
            file=sys.stderr,
        )
    print("next: envkit lock --all && envkit render --all && make help", file=sys.stderr)
    return 0

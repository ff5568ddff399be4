"""`envkit init`: make the repository here an envkit project (envkit.project.scaffold), writing every
file or none, and never over a file that exists (a dangling link included); .gitignore gets a block added."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

# The skipped files init names one by one; past these, it counts them (a folder of modules is not a list to read).
SHOWN_SKIPPED = 20


def register(subparsers) -> None:
    init = subparsers.add_parser(
        "init",
        help="make this repository an envkit project: envkit.yaml, its experiments and a make include",
        description="Write envkit.yaml (the default targets at the torch your requirements name, your "
        "requirements wired into every lock, one experiment per entry script on every default target, or on the GPU "
        "targets only for a script that opens CUDA only) and "
        "envkit.mk (make <experiment> [TARGET=cuda]), plus a Makefile that includes it where there is none. "
        "An entry script is a top-level *.py with a __main__ guard, or top-level code that trains (it imports torch "
        "or another framework and calls .backward(), optimizer.step(), .fit()), or train.py, main.py, ... with "
        "top-level code; init names each one it found and each file it skipped, with the reason. An existing file "
        "is never overwritten: init stops, naming it, and writes nothing.",
    )
    init.add_argument("--dir", type=Path, default=Path("."), help="the repository (default: here)")
    init.set_defaults(func=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    from envkit.errors import EnvkitError
    from envkit.project.files import in_work_tree
    from envkit.project.scaffold import MAKE_INCLUDE, scaffold
    from envkit.support.bounded_load import load_text
    from envkit.support.packaged import packaged_templates

    root = args.dir
    if not root.is_dir():
        raise EnvkitError(f"--dir {root}: not a directory")
    _refuse_git_internals(root)
    plan = scaffold(root, load_text(packaged_templates() / "init" / MAKE_INCLUDE))
    existing = [name for name in plan.files if os.path.lexists(root / name)]
    if existing:
        what = "exists" if (root / existing[0]).exists() else "is a link to nothing"
        raise EnvkitError(
            f"{root / existing[0]} {what}: envkit init never overwrites a file; edit it, or move it away and run init "
            "again"
        )
    if os.path.islink(root / ".gitignore") and plan.gitignore is not None:
        raise EnvkitError(f"{root / '.gitignore'} is a link: envkit init adds its block to a file of the project only")
    if not os.access(root, os.W_OK | os.X_OK):
        raise EnvkitError(f"{root}: not writable by this user: init writes {', '.join(plan.files)} there")
    files = plan.files | ({".gitignore": plan.gitignore} if plan.gitignore is not None else {})
    _write_all(root, files)
    print(f"envkit: wrote {', '.join(files)} (torch {plan.torch})", file=sys.stderr)
    _print_survey(plan)
    if plan.requirements is None:
        print(
            "envkit: no requirements.in, requirements.txt or pyproject dependencies found: add requirements: FILE",
            file=sys.stderr,
        )
    if "Makefile" not in plan.files:
        print(f"envkit: add `include {MAKE_INCLUDE}` to your Makefile for make <experiment>", file=sys.stderr)
    if not in_work_tree(root):
        print(
            "envkit: not a git repository: its images and notebooks will hold every file here less .dockerignore; "
            "in a git repository, only the files git tracks (git init, then commit)",
            file=sys.stderr,
        )
    print("next: envkit lock --all && envkit render --all && make help", file=sys.stderr)
    return 0


def _print_survey(plan) -> None:
    """Each top-level *.py init looked at: the entry scripts it found (why, and how they run) and the skipped (why)."""
    from envkit.project.scaffold import MAX_SCRIPTS

    found = plan.found
    skipped = [script for script in plan.surveyed if not script.entry]
    if not found:
        print("envkit: no entry script found among the top-level *.py: add experiments to envkit.yaml", file=sys.stderr)
    lines = []
    for script in found[:MAX_SCRIPTS]:
        how = [script.reason]
        if script.torchrun:
            how.append("reads the rank torchrun gives: scale: torchrun")
        if script.cuda_only:
            how.append(f"{', '.join(script.cuda_only)} with no CPU path: GPU targets only (it fails on cpu)")
        lines.append(f"envkit: found {script.name}: {'; '.join(how)}")
    if len(found) > MAX_SCRIPTS:
        lines.append(
            f"envkit: {len(found)} entry scripts: the first {MAX_SCRIPTS} have an experiment; add the others you run "
            "to envkit.yaml"
        )
    lines += [f"envkit: skipped {script.name}: {script.reason}" for script in skipped[:SHOWN_SKIPPED]]
    if len(skipped) > SHOWN_SKIPPED:
        lines.append(f"envkit: skipped {len(skipped) - SHOWN_SKIPPED} more *.py files")
    for line in lines:
        print(line, file=sys.stderr)


def _refuse_git_internals(root: Path) -> None:
    """A bare repository, or a folder inside .git, has no work tree to make a project of."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--is-bare-repository", "--is-inside-git-dir"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return  # no git: the folder is a project's as it stands
    if done.returncode == 0 and "true" in done.stdout.split():
        from envkit.errors import EnvkitError

        raise EnvkitError(
            f"{root} is a bare git repository (or inside one's .git): run envkit init in a clone's work tree"
        )


def _write_all(root: Path, files: dict[str, str]) -> None:
    """Every file or none: a write that fails takes back the ones before it (one line names what failed)."""
    from envkit.errors import EnvkitError
    from envkit.support.atomic import write_text_atomic
    from envkit.support.bounded_load import read_bytes

    done: list[tuple[Path, bytes | None]] = []
    try:
        for name, text in files.items():
            path = root / name
            done.append((path, read_bytes(path) if path.is_file() else None))
            write_text_atomic(path, text)
    except OSError as exc:
        for written, before in reversed(done):
            if before is None:
                written.unlink(missing_ok=True)
            else:
                written.write_bytes(before)
        raise EnvkitError(f"cannot write {path}: {exc.strerror or exc}; init wrote nothing") from None

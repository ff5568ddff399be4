"""`envkit render`.

Imports only the config and render modules: this path must stay free of
torch, docker and matplotlib so that the CLI starts fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envkit.cli.options import add_config, add_target


def register(subparsers) -> None:
    render = subparsers.add_parser(
        "render",
        help="render docker/<target>/ (Dockerfile, run.sh, .dockerignore) and the notebook targets' notebooks",
        description="Render each image target's Dockerfile, run.sh and .dockerignore from templates/, and each "
        "notebook target's committed notebooks (its `notebooks` list) into notebooks/. Output is byte-identical on "
        "every run and machine; all files are written or none.",
    )
    add_config(render)
    which = render.add_mutually_exclusive_group(required=True)
    add_target(which, "render one target")
    which.add_argument("--all", action="store_true", help="render every target in the config")
    output = render.add_mutually_exclusive_group()
    output.add_argument("--stdout", action="store_true", help="print the files instead of writing them")
    output.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the files under --output are stale"
    )
    render.add_argument(
        "--output",
        metavar="DIR",
        type=Path,
        help="output directory of the image targets' files (default: envkit.yaml's output.images, docker/); "
        "notebooks always go to output.notebooks (notebooks/) beside the config",
    )
    render.set_defaults(func=cmd_render)


def cmd_render(args: argparse.Namespace) -> int:
    from envkit.errors import EnvkitError
    from envkit.notebook import committed
    from envkit.project.output import refuse_outside
    from envkit.render import output as rendered
    from envkit.render.selection import render_selection

    selection = "--all" if args.all else args.target
    names, files, notebook_names, notebook_files, (images, notebooks) = render_selection(
        args.config, selection, committed.render
    )
    root = args.config.resolve().parent
    output = args.output if args.output is not None else root / images
    # Notebook targets: their committed notebooks, in the config's notebook folder (whatever --output says).
    notebooks = root / notebooks
    if args.stdout:
        for file in files + notebook_files:
            sys.stdout.write(f"==> {file.path.as_posix()} <==\n{file.text}")
        return 0
    if args.check:
        from envkit.render.check import Output, check

        outputs = [Output(output, names, files), Output(notebooks, notebook_names, notebook_files)]
        unlisted = committed.orphans(notebooks, notebook_files) if args.all else []
        report = check(outputs, whole=args.all, unlisted=unlisted)
        sys.stdout.write("".join(f"{line}\n" for line in report.lines))
        if report.problem():
            fix = "--all" if args.all else f"--target {args.target}"
            raise EnvkitError(
                f"rendered files are stale ({report.problem()}): run `envkit render {fix}` and commit", exit_code=1
            )
        return 0
    refuse_outside(
        root, [output, notebooks, *(output / f.path for f in files), *(notebooks / f.path for f in notebook_files)]
    )
    rendered.refuse_the_users(notebooks, notebook_files)  # before the image folder is written: all or nothing
    written = rendered.write(output, files)
    removed = rendered.remove_leftovers(output, names) if args.all else []
    print(
        f"rendered {len(files)} files for {', '.join(names) or 'no image target'} into {output} "
        f"({len(written)} changed)"
        + "".join(f"; removed {directory}'s rendered files (not a target in the config)" for directory in removed)
    )
    removed = committed.leftovers(notebooks, notebook_files) if args.all else []
    if notebook_names or removed:
        written = rendered.write(notebooks, notebook_files)
        rendered.remove(removed)
        print(
            f"rendered {len(notebook_files)} notebooks for {', '.join(notebook_names) or 'no notebook target'} "
            f"into {notebooks} ({len(written)} changed)"
            + "".join(f"; removed {path} (no notebook target lists it)" for path in removed)
        )
    return 0

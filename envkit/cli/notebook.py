"""`envkit notebook`: an experiment as a Colab or Kaggle notebook that runs on its target's lock."""

from __future__ import annotations

import argparse
from pathlib import Path

from envkit.cli.options import add_config, add_target
from envkit.errors import EnvkitError


def register(subparsers) -> None:
    notebook = subparsers.add_parser(
        "notebook",
        help="write an experiment as a Colab or Kaggle notebook for a notebook target (runs on its lock)",
        description="Write EXPERIMENT as a notebook (nbformat 4) for a notebook target of envkit.yaml (one with a "
        "platform): what it is, a runtime check of the accelerator, a fresh virtual environment holding exactly the "
        "target's lock (hash-checked), the recipe's files embedded with their sha256, the run, and envkit's report. "
        "Committed notebooks (the targets' `notebooks` lists) are render's: envkit render --all writes and checks "
        "them in notebooks/<target>/, and only they carry an 'Open in Colab' link.",
    )
    notebook.add_argument("experiment", help="an experiment of the project (envkit.yaml's experiments), e.g. tpu-mnist")
    add_target(notebook, "a notebook target of the config, e.g. colab-tpu", required=True)
    notebook.add_argument(
        "--output",
        metavar="FILE.ipynb",
        type=Path,
        help="where to write it (default: <experiment>.ipynb in the working directory); never under the project's "
        "notebooks/, which render keeps for the targets' notebooks lists, nor over a file that is not a notebook "
        "envkit wrote",
    )
    notebook.add_argument(
        "--use-runtime",
        action="store_true",
        help="run on the runtime's own packages instead of the lock, and record how they differ "
        "(default name: ...-runtime.ipynb)",
    )
    notebook.add_argument(
        "--colab-link",
        action="store_true",
        help="print the 'Open in Colab' link of the committed notebook at --revision; write nothing",
    )
    notebook.add_argument(
        "--revision",
        help="with --colab-link: a commit, branch or tag of the project's git repository that holds the notebook "
        "(default: HEAD); the link names its commit",
    )
    add_config(notebook)
    notebook.set_defaults(func=cmd_notebook)


def cmd_notebook(args: argparse.Namespace) -> int:
    from envkit.notebook import builder
    from envkit.project.load import load_config
    from envkit.project.output import refuse_outside
    from envkit.support.atomic import write_text_atomic

    if args.revision is not None and not args.colab_link:
        raise EnvkitError("--revision goes with --colab-link")
    if args.colab_link and (args.use_runtime or args.output is not None):
        raise EnvkitError(
            "--colab-link links a committed notebook, which runs on the lock and sits where render put it: "
            "leave out --use-runtime and --output"
        )
    if args.output is not None and args.output.suffix != ".ipynb":
        raise EnvkitError(f"--output {args.output}: a notebook file ends in .ipynb")
    config = load_config(args.config)
    if args.colab_link:
        from envkit.notebook.colab_link import colab_link

        print(colab_link(config, args.experiment, args.target, args.revision))
        return 0
    packages = "runtime" if args.use_runtime else "lock"
    output = args.output or Path(builder.notebook_path(config.output, args.target, args.experiment, packages).name)
    if output.resolve().is_relative_to(config.root / config.output.notebooks):
        raise EnvkitError(
            f"{output}: {config.output.notebooks.as_posix()}/ is render's, for the targets' notebooks lists: "
            "write it elsewhere (--output), or "
            f"list {args.experiment} in target {args.target}'s notebooks and run envkit render --all"
        )
    refuse_outside(config.root, [output])
    _never_over_a_users_file(output)
    notebook = builder.render_notebook(config, args.experiment, args.target, packages)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(output, notebook.text)
    except OSError as exc:
        raise EnvkitError(f"cannot write {output}: {exc.strerror or exc}") from None
    print(f"wrote {output} ({len(notebook.text.encode()) // 1024} KiB)")
    return 0


def _never_over_a_users_file(output: Path) -> None:
    """One line where ``output`` is there and is not a notebook envkit wrote (its mark in the first cell): the
    user's own notebook of that name, or a link, which envkit never overwrites or replaces."""
    from envkit.project import marks

    if marks.foreign(output, marks.NOTEBOOK):
        mark = marks.NOTEBOOK.decode().strip()
        raise EnvkitError(
            f"{output} is not a notebook envkit wrote (it lacks the mark {mark!r} of envkit's notebooks): envkit "
            "notebook never overwrites it; move it away, or write elsewhere with --output FILE.ipynb"
        )

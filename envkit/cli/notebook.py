"""`envkit notebook`: an experiment as a Colab or Kaggle notebook that runs on its target's lock."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from envkit.cli.options import add_config
from envkit.errors import EnvkitError


def register(subparsers) -> None:
    notebook = subparsers.add_parser(
        "notebook",
        help="write an experiment as a Colab or Kaggle notebook for a notebook target (runs on its lock)",
        description="Write EXPERIMENT as a notebook (nbformat 4) for a notebook target of envkit.yaml (one with a "
        "platform): what it is, a runtime check of the accelerator, a fresh virtual environment holding exactly the "
        "target's lock (hash-checked), the recipe's files embedded with their sha256, the run, and envkit's report. "
        "Committed notebooks (the targets' `notebooks` lists) are written and checked by envkit render --all.",
    )
    notebook.add_argument("experiment", help="an experiment of the project (envkit.yaml's experiments), e.g. tpu-mnist")
    notebook.add_argument(
        "--target", required=True, metavar="NAME", help="a notebook target of the config, e.g. colab-tpu"
    )
    notebook.add_argument(
        "--output",
        metavar="FILE.ipynb",
        type=Path,
        help="where to write it (default: notebooks/<target>/<experiment>.ipynb beside the config)",
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
    notebook.add_argument("--revision", help="with --colab-link: the git revision (default: the project's HEAD)")
    add_config(notebook)
    notebook.set_defaults(func=cmd_notebook)


def cmd_notebook(args: argparse.Namespace) -> int:
    from envkit.notebook import builder
    from envkit.project.config import load_config
    from envkit.support.atomic import write_text_atomic

    if args.revision and not args.colab_link:
        raise EnvkitError("--revision goes with --colab-link")
    if args.output is not None and args.output.suffix != ".ipynb":
        raise EnvkitError(f"--output {args.output}: a notebook file ends in .ipynb")
    config = load_config(args.config)
    packages = "runtime" if args.use_runtime else "lock"
    if args.colab_link:
        target = builder.notebook_target(config, args.target)
        builder.fitting_experiment(config, target, args.experiment)
        if target.platform != "colab":
            raise EnvkitError(f"--colab-link: target {target.name} runs on {target.platform}, not colab")
        path = builder.notebook_path(target.name, args.experiment, packages)
        url = builder.colab_url(config, path, args.revision or _head(config.root))
        if url is None:
            raise EnvkitError(
                f"--colab-link needs the config's source to be a GitHub repository (source: {config.source})"
            )
        print(url)
        return 0
    notebook = builder.render_notebook(config, args.experiment, args.target, packages)
    output = args.output or config.root / notebook.path
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(output, notebook.text)
    except OSError as exc:
        raise EnvkitError(f"cannot write {output}: {exc.strerror or exc}") from None
    print(f"wrote {output} ({len(notebook.text.encode()) // 1024} KiB)")
    return 0


def _head(root: Path) -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        done = None
    if done is None or done.returncode != 0:
        raise EnvkitError(f"--colab-link: {root} is not a git checkout; pass --revision REV")
    return done.stdout.strip()

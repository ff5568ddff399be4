"""`envkit targets`, `envkit matrix` and `envkit render`.

Imports only the config, matrix and render modules: this path must stay free of
torch, docker and matplotlib so that the CLI starts fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envkit.cli.options import add_config, add_target


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

    matrix = subparsers.add_parser(
        "matrix",
        help="list the supported torch / CUDA / torch_xla combinations",
        description="Print envkit's compatibility matrix (envkit/data/matrix.yaml): what a config may combine.",
    )
    matrix.add_argument(
        "--verify",
        action="store_true",
        help="ask the package index pip uses (PIP_INDEX_URL, pip config, or pip's default) whether every pinned "
        "version exists and its Requires-Dist and Python wheels agree; exit 1 on any disagreement, 3 when the "
        "index cannot be reached",
    )
    matrix.set_defaults(func=cmd_matrix)

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
        help="output directory of the image targets' files (default: docker/ beside the config); "
        "notebooks always go to notebooks/ beside the config",
    )
    render.set_defaults(func=cmd_render)


def cmd_targets(args: argparse.Namespace) -> int:
    from envkit.lock.lockfile import lock_status
    from envkit.project.config import load_config

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
    _print_table(rows)
    if stale:
        print()
        print("\n".join(stale))
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    from envkit.project.matrix import load_matrix, version_key

    matrix = load_matrix()
    if args.verify:
        from envkit.lock import index_check as matrix_verify

        return matrix_verify.run(matrix)
    rows = [
        (
            "TORCH",
            "RELEASES",
            "TORCHVISION",
            "PYTHON",
            "CUDA VARIANTS (first = default, * = the default index's)",
            "TPU-VM BACKENDS",
        )
    ]
    for minor in sorted(matrix.torch, key=version_key):
        release = matrix.torch[minor]
        cuda = (
            ", ".join(
                f"{variant}{'*' if variant == release.pypi_cuda else ''} ({matrix.cuda[variant].cuda})"
                for variant in release.cuda_choices()
            )
            or "-"
        )
        vision = f"{release.torchvision}.x" if release.torchvision else "none (torchvision: false)"
        rows.append(
            (
                f"{minor}.x",
                " ".join(release.versions),
                vision,
                "-".join(release.python),
                cuda,
                _tpu_backends(matrix, release),
            )
        )
    _print_table(rows)
    print()
    rows = [("TORCH_XLA", "(TORCH, TORCH_XLA) PAIRS", "LIBTPU", "PYTHON")]
    for minor, xla in matrix.torch_xla.items():
        pairs = ", ".join(f"({torch}, {version})" for torch, version in xla.pairs)
        rows.append((f"{minor}.x", pairs, f"{xla.libtpu_package} {xla.libtpu}", "-".join(xla.python)))
    _print_table(rows)
    print()
    rows = [("TORCH_TPU", "TORCH", "LIBTPU", "PYTHON")]
    for version, tpu in matrix.torch_tpu.items():
        rows.append((version, "-".join(tpu.torch), f">= {tpu.libtpu}", "-".join(tpu.python)))
    _print_table(rows)
    print(
        f"\ncpu wheels: {matrix.cpu_index_url}; torchvision's patch release equals torch's; "
        "* marks the CUDA build of the default index's own torch, which locks with no second index; "
        "CUDA variant lists and base images name their source in envkit/data/matrix.yaml."
    )
    return 0


def _tpu_backends(matrix, release) -> str:
    from envkit.project.matrix import version_in_range

    backends = []
    if release.minor in matrix.torch_xla:
        backends.append("torch_xla")
    if any(version_in_range(v, tpu.torch) for tpu in matrix.torch_tpu.values() for v in release.versions):
        backends.append("torch_tpu")
    return ", ".join(backends) or "-"


def cmd_render(args: argparse.Namespace) -> int:
    from envkit.errors import EnvkitError
    from envkit.project import NOTEBOOKS
    from envkit.render import memo
    from envkit.render import output as rendered

    selection = "--all" if args.all else args.target
    remembered = memo.recall(args.config, selection)
    names, files = remembered if remembered is not None else _render(args.config, selection)
    output = args.output if args.output is not None else args.config.resolve().parent / rendered.DEFAULT_OUTPUT
    # Notebook targets: their committed notebooks, in notebooks/ beside the config (whatever --output says).
    notebook_names, notebook_files = _notebooks(args.config, selection)
    notebooks = args.config.resolve().parent / NOTEBOOKS
    if args.stdout:
        for file in files + notebook_files:
            sys.stdout.write(f"==> {file.path.as_posix()} <==\n{file.text}")
        return 0
    if args.check:
        from envkit.notebook.committed import orphans as unlisted
        from envkit.render.check import Output, check

        outputs = [Output(output, names, files), Output(notebooks, notebook_names, notebook_files)]
        report = check(outputs, whole=args.all, unlisted=unlisted(notebooks, notebook_files) if args.all else [])
        sys.stdout.write("".join(f"{line}\n" for line in report.lines))
        if report.problem():
            fix = "--all" if args.all else f"--target {args.target}"
            raise EnvkitError(
                f"rendered files are stale ({report.problem()}): run `envkit render {fix}` and commit", exit_code=1
            )
        return 0
    written = rendered.write(output, files)
    removed = rendered.remove_leftovers(output, names) if args.all else []
    print(
        f"rendered {len(files)} files for {', '.join(names) or 'no image target'} into {output} ({len(written)} changed)"
        + "".join(f"; removed {directory}'s rendered files (not a target in the config)" for directory in removed)
    )
    from envkit.notebook import committed

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


def _selected(config, selection: str) -> list[str]:
    return list(config.targets) if selection == "--all" else [config.target(selection).name]


def _render(config_path: Path, selection: str):
    """Render the image targets in full, and remember the result with every file it read (envkit.render.memo)."""
    from envkit.project.config import load_config
    from envkit.render import memo
    from envkit.render import target_files as render

    config = load_config(config_path)
    names = [name for name in _selected(config, selection) if name in config.images]
    files = render.render_targets(config, names)
    memo.remember(config_path, selection, names, files, render.files_read(config, names))
    return names, files


def _project_inputs(config) -> list[Path]:
    from envkit.project.files import IGNORE_FILE, git_index, project_files

    files = project_files(config.root, config.files_limit_mb)
    return [
        *(files.root / name for name in files.paths),
        config.root / IGNORE_FILE,
        *filter(None, [git_index(config.root)]),
    ]


def _notebooks(config_path: Path, selection: str):
    """The notebook targets' committed notebooks, remembered like the image targets' files."""
    from envkit.render import memo

    key = f"{selection} notebooks"
    remembered = memo.recall(config_path, key)
    if remembered is not None:
        return remembered
    from envkit.lock.lockfile import lock_path
    from envkit.notebook import committed
    from envkit.project.config import load_config
    from envkit.project.datafile import DATA_DIR
    from envkit.project.experiments import table_path
    from envkit.render.target_files import template_files

    config = load_config(config_path)
    names = [name for name in _selected(config, selection) if name not in config.images]
    files = committed.render(config, names)
    # What a notebook embeds beyond envkit's own code (which the memo hashes anyway): the recipes, the locks,
    # and for a command experiment the project's files, with git's index (a file tracked since) and .dockerignore.
    listed = {experiment for name in names for experiment in config.targets[name].notebooks}
    commands = any(config.experiments[experiment].command is not None for experiment in listed)
    read = [
        config.path,
        table_path(config.path),
        *DATA_DIR.iterdir(),
        *template_files(config.root),
        *(path for path in (config.root / "recipes").rglob("*.py")),
        *(lock_path(config, name) for name in names),
        *(_project_inputs(config) if commands else ()),
    ]
    memo.remember(config_path, key, names, files, read)
    return names, files


def _print_table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())

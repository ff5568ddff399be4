"""`envkit matrix`: the supported torch / CUDA / torch_xla combinations."""

from __future__ import annotations

import argparse

from envkit.cli.options import print_table


def register(subparsers) -> None:
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
    print_table(rows)
    print()
    rows = [("TORCH_XLA", "(TORCH, TORCH_XLA) PAIRS", "LIBTPU", "PYTHON")]
    for minor, xla in matrix.torch_xla.items():
        pairs = ", ".join(f"({torch}, {version})" for torch, version in xla.pairs)
        rows.append((f"{minor}.x", pairs, f"{xla.libtpu_package} {xla.libtpu}", "-".join(xla.python)))
    print_table(rows)
    print()
    rows = [("TORCH_TPU", "TORCH", "LIBTPU", "PYTHON")]
    for version, tpu in matrix.torch_tpu.items():
        rows.append((version, "-".join(tpu.torch), f">= {tpu.libtpu}", "-".join(tpu.python)))
    print_table(rows)
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

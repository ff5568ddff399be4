"""Which packages of a host lock have no wheel on each platform and Python envkit supports.

uv installs the lock hash-checked, dry, for a platform that is not this host's
(`uv pip install --dry-run --python-platform P --python-version V --require-hashes`):
it reads only the index's metadata, about a second a case. uv stops at the first
package it cannot serve, so that one is set aside and the rest tried again, until
the others install: the result names every blocked package, not just the first.
`envkit lock --requirements` records the result in the lock's header (and refuses a
platform the input must serve), tests/lock/test_coverage.py checks it against the
index, and `make platforms` prints it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.lock.host_platforms import PLATFORMS, PYTHONS, HostPlatform
from envkit.lock.lockfile import entry_name, normalise, requirement_entries
from envkit.support.bounded_load import load_text
from envkit.support.uv import uv_binary, uv_env

UV_TIMEOUT_S = 300
_RESOLVED = re.compile(r"Resolved (\d+) packages?")
# uv's ways of saying a pinned package has no file for the platform or Python asked for.
_BLOCKED = (
    re.compile(r"Because (\S+?)==\S+ has no (?:usable wheels|wheels with a matching)"),
    re.compile(r"[`'](\S+?)==\S+[`'] can't be installed because it doesn't have a source distribution or wheel"),
)


@dataclass(frozen=True)
class Cell:
    """A lock on one platform and Python: how many of its packages install there, which have no wheel there."""

    packages: int
    missing: tuple[str, ...]


@dataclass(frozen=True)
class Sources:
    """Where the lock's files come from: PyTorch's index for its torch build, the default index (None: the
    installer's own) and find-links pages."""

    torch_index: str | None = None
    index_url: str | None = None
    find_links: tuple[str, ...] = ()


def coverage(
    lock_text: str, manylinux: str, sources: Sources = Sources(), cells: list[tuple[str, str]] | None = None
) -> dict[tuple[str, str], Cell]:
    """(platform, Python) -> the lock there, for ``cells`` (default: every platform and Python envkit supports)."""
    cells = cells or [(name, python) for name in PLATFORMS for python in PYTHONS]
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = pool.map(lambda cell: missing_wheels(lock_text, PLATFORMS[cell[0]], cell[1], manylinux, sources), cells)
        return dict(zip(cells, found, strict=True))


def missing_wheels(
    lock_text: str, host: HostPlatform, python: str, manylinux: str, sources: Sources = Sources()
) -> Cell:
    """The lock on ``host`` with ``python``: the packages that install there and those no wheel serves (sorted)."""
    entries = requirement_entries(lock_text)
    missing: list[str] = []
    while True:
        blocked = _blocked(entries, host, python, manylinux, sources)
        if isinstance(blocked, int):
            return Cell(blocked, tuple(sorted(missing)))
        missing.append(blocked)
        entries = [entry for entry in entries if entry_name(entry) != blocked]


def _blocked(entries: list[str], host: HostPlatform, python: str, manylinux: str, sources: Sources) -> str | int:
    """The one package uv names as having no wheel there, or how many packages install there when all do."""
    if not entries:
        return 0
    env = uv_env() | dict(host.uv_env)
    platform = host.uv_platform.format(manylinux=manylinux)
    with tempfile.TemporaryDirectory(prefix="envkit-coverage-") as work:
        lock = Path(work, "requirements.lock")
        lock.write_text("\n".join(entries) + "\n", encoding="utf-8")
        argv = [
            uv_binary(), "pip", "install", "--dry-run", "--no-deps", "--require-hashes", "--only-binary", ":all:",
            "--python-platform", platform, "--python-version", python, "--target", str(Path(work, "target")),
            "--python", sys.executable, "--no-config", "--color", "never", "-r", str(lock),
        ]  # fmt: skip
        if sources.index_url:  # a target's pip_index_url stands in for the default index
            argv += ["--default-index", sources.index_url]
        for link in sources.find_links:
            argv += ["--find-links", link]
        if sources.torch_index:  # the lock's torch build is only there; the hashes still pin each file
            argv += ["--index", sources.torch_index, "--index-strategy", "unsafe-best-match"]
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=UV_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise EnvkitError(f"uv did not finish checking {host.name} python {python} in {UV_TIMEOUT_S} s") from None
    if done.returncode == 0:
        resolved = _RESOLVED.search(done.stderr)
        return int(resolved.group(1)) if resolved else 0
    for pattern in _BLOCKED:
        if match := pattern.search(done.stderr):
            return normalise(match.group(1))
    reason = " ".join(line.strip() for line in done.stderr.splitlines() if line.strip())[:400]
    raise EnvkitError(f"uv cannot check the lock on {host.name} python {python}: {reason or 'no output'}")


def matrix_lines(name: str, cells: dict[tuple[str, str], Cell]) -> list[str]:
    """The coverage matrix of one lock, a line per platform and Python: packages, ok or blocked (and by what)."""
    return [
        f"{name:<10} {where:<12} {python:<5} {cell.packages:>4}  "
        + (f"blocked: no wheel for {', '.join(cell.missing)}" if cell.missing else "ok")
        for (where, python), cell in cells.items()
    ]


def main(argv: list[str] | None = None) -> int:
    """`make platforms`: the coverage matrix of host locks, checked against the index now."""
    import argparse

    from envkit.lock.inputs import requirements_inputs
    from envkit.lock.lockfile import read_lock
    from envkit.lock.manylinux import host_manylinux

    parser = argparse.ArgumentParser(
        prog="python -m envkit.lock.coverage",
        description="Which packages of each host lock have no wheel on each supported platform and Python "
        "(uv pip install --dry-run against the index), beside what the lock's header recorded.",
    )
    parser.add_argument("locks", nargs="+", type=Path, help="host locks, e.g. requirements/*.lock")
    args = parser.parse_args(argv)
    manylinux, stale = host_manylinux(), []
    try:
        for path in args.locks:
            inputs = requirements_inputs(path.with_suffix(".in"))
            cells = coverage(load_text(path), manylinux, Sources(inputs.torch_index))
            print("\n".join(matrix_lines(path.stem, cells)), flush=True)
            if read_lock(path).wheels != {cell: found.missing for cell, found in cells.items()}:
                stale.append(str(path))
    except EnvkitError as exc:
        print(f"envkit: error: {exc}", file=sys.stderr)
        return exc.exit_code
    if stale:
        print(f"envkit: error: the index no longer gives what {', '.join(stale)} recorded: relock", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`envkit lock`: resolve each target's complete dependency set with uv and write its lock.

uv resolves for a platform that is not the host's from index metadata alone
(pip-tools cannot). torch and torchvision are bound to PyTorch's index through
an explicit index (uv's `tool.uv.sources` + `explicit = true`), and every other
package comes from the default index: uv's first-index strategy never looks a
name up on a second index, so no package can fall through to the other one.
uv's `--torch-backend` would do the binding too, but it names PyTorch's host
itself and cannot be pointed at a mirror or at the tests' local index.

A target's previous lock is handed to uv as its preferences, so relocking after
one pin changed moves only what must move; `--upgrade-package P` lets P float.

A lock holds a pre-release only where a requirement names one, as pip chooses: a resolution that took one
unasked is resolved again by that rule, or refused in one line (_named_prereleases_only).
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.lock.base_digest import resolve_base
from envkit.lock.header import lock_header
from envkit.lock.host_platforms import PLATFORMS, PYTHONS
from envkit.lock.inputs import TORCH_INDEX_PACKAGES, LockInputs, lock_inputs, requirements_inputs
from envkit.lock.lockfile import (
    UNIVERSAL,
    lock_path,
    normalise,
    read_lock,
    requirement_entries,
    requirements_lock_path,
)
from envkit.lock.manylinux import host_manylinux, target_manylinux
from envkit.project import marks
from envkit.project.config import ProjectConfig, Target
from envkit.project.matrix import load_matrix
from envkit.project.output import refuse_outside
from envkit.project.requirement import requirement_name
from envkit.support.atomic import write_text_atomic
from envkit.support.bounded_load import Refused, load_text, read_text
from envkit.support.uv import uv_binary, uv_env

UV_TIMEOUT_S = 600


def lock_targets(config: ProjectConfig, names: list[str], upgrade: list[str], torch_index_url: str | None) -> int:
    inputs = {name: lock_inputs(config.target(name)) for name in names}
    paths = {name: lock_path(config, name) for name in names}
    _check_upgrade(list(paths.values()), upgrade, config.root, "the target")

    def text(name: str, previous: str | None, uv: tuple[str, ...]) -> str:
        return _target_text(config, inputs[name], previous, upgrade, torch_index_url, uv)

    return _write_locks({paths[name]: functools.partial(text, name) for name in names}, config.root)


def lock_requirements(files: list[Path], upgrade: list[str], torch_index_url: str | None) -> int:
    """Lock each host environment's requirements/<name>.in into <name>.lock beside it."""
    inputs = {path: requirements_inputs(path) for path in files}
    _check_upgrade([requirements_lock_path(path) for path in files], upgrade, Path.cwd(), "the environment")

    def text(path: Path, previous: str | None, uv: tuple[str, ...]) -> str:
        torch_index = inputs[path].torch_index_for(torch_index_url)
        body, command = _compile(inputs[path], previous, upgrade, torch_index, uv)
        # Every platform and Python is checked and recorded (make platforms prints them); those the input names must
        # pass.
        cells = [(where, python) for where in PLATFORMS for python in PYTHONS]
        wheels = _served(str(path), inputs[path], body, torch_index, host_manylinux(), cells, "its `# platforms:` line")
        return lock_header(inputs[path], None, command, body, wheels) + body

    return _write_locks({requirements_lock_path(path): functools.partial(text, path) for path in files}, Path.cwd())


def _served(
    subject: str,
    inputs: LockInputs,
    body: str,
    torch_index: str | None,
    manylinux: str,
    cells: list[tuple[str, str]],
    platforms_from: str,
) -> dict[tuple[str, str], tuple[str, ...]]:
    """The lock's coverage of ``cells`` (platform, Python), checked: one line naming what blocks one the inputs
    must serve (``platforms_from`` says where they name their platforms)."""
    from envkit.lock.coverage import Sources, coverage

    found = coverage(body, manylinux, Sources(torch_index, inputs.index_url, inputs.find_links), cells)
    pythons = inputs.python.split()
    platforms = inputs.platform.removeprefix(UNIVERSAL).split()
    blocked = [
        f"{where} python {python} ({', '.join(cell.missing)})"
        for (where, python), cell in found.items()
        if cell.missing and where in platforms and python in pythons
    ]
    if blocked:
        raise EnvkitError(
            f"{subject}: no wheel on {'; '.join(blocked)}: pin versions that have one, mark them off there "
            f"(e.g. `; platform_machine != 'aarch64'`), or leave that platform out ({platforms_from})"
        )
    return {cell: result.missing for cell, result in found.items()}


def _write_locks(jobs: dict[Path, Callable[[str | None, tuple[str, ...]], str]], root: Path) -> int:
    """Resolve every lock (job: previous text, uv -> new text), write those that changed, one line each."""
    refuse_outside(root, jobs)
    previous = {path: _previous_text(path) for path in jobs}
    uv = uv_binary()
    uv_version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=False).stdout.split()[:2]
    written, failures = [], []
    for path, make_text in jobs.items():
        if previous[path] is not None and marks.foreign(path, marks.ANY_LOCK):
            failures.append(
                f"{path} is not a lock envkit wrote (it lacks the mark {marks.ANY_LOCK.decode().strip()!r}): envkit "
                "lock never overwrites it; move it away, then lock again"
            )
            continue
        try:
            text = make_text(previous[path], (uv, *uv_version))
        except EnvkitError as exc:
            failures.append(str(exc))
            continue
        if text != previous[path]:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomic(path, text)
            except OSError as exc:
                failures.append(f"cannot write {path}: {exc.strerror or exc}")
                continue
        state = "wrote" if text != previous[path] else "unchanged"
        written.append(f"{state} {_shown(path, root)} ({len(read_lock(path).packages)} packages)")
    if written:
        print("\n".join(written))
    for failure in failures:
        print(f"envkit: error: {failure}", file=sys.stderr)
    return 2 if failures else 0


def _shown(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _previous_text(path: Path) -> str | None:
    try:
        return read_text(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise EnvkitError(f"cannot read {path}: {exc.strerror or exc}") from None
    except Refused as exc:
        raise EnvkitError(exc.at(path)) from None


def _check_upgrade(paths: list[Path], upgrade: list[str], root: Path, what: str) -> None:
    locks = [read_lock(path) for path in paths]
    for package in upgrade:
        if not any(lock and normalise(package) in lock.packages for lock in locks):
            where = ", ".join(_shown(path, root) for path in paths)
            raise EnvkitError(
                f"--upgrade-package {package}: no such package in {where}; name a package the lock pins "
                f"(or drop --upgrade-package to lock {what} anew)"
            )


def _target_text(
    config: ProjectConfig,
    inputs: LockInputs,
    previous: str | None,
    upgrade: list[str],
    torch_index_url: str | None,
    uv: tuple[str, ...],
) -> str:
    torch_index = inputs.torch_index_for(torch_index_url)
    try:
        body, command = _compile(inputs, previous, upgrade, torch_index, uv)
    except TorchIndexUnreachable as exc:
        raise EnvkitError(f"{exc}{_default_index_build(config.target(inputs.target))}") from None
    target = config.target(inputs.target)
    wheels = None
    if inputs.platform.startswith(UNIVERSAL):  # an image of several platforms: each must install the lock natively
        cells = [(where, inputs.python) for where in target.platforms]
        wheels = _served(
            inputs.subject, inputs, body, torch_index, target_manylinux(target), cells, "the target's platforms"
        )
    if target.is_notebook:
        from envkit.project.notebook_platforms import runtime_of

        runtime = runtime_of(target)
        recorded = (
            f"none: runs in {target.platform}'s {runtime.name} runtime ({runtime.facts['os'].value}, "
            f"glibc {runtime.glibc})"
        )
    else:
        # After resolving and checking: a target that cannot be locked gets its one error line, no warning.
        base = resolve_base(inputs.target, target.base_image)
        if base.note:
            print(f"envkit: warning: target {inputs.target}: {base.note}", file=sys.stderr)
        recorded = base.recorded()
    return lock_header(inputs, recorded, command, body, wheels, target.platforms) + body


def _compile(
    inputs: LockInputs, previous: str | None, upgrade: list[str], torch_index: str | None, uv: tuple[str, ...]
) -> tuple[str, str]:
    """(lock body, the command that resolved it); uv is (binary, "uv", version)."""
    if inputs.platform.startswith(UNIVERSAL):  # a host lock, or an image of several: every platform in one file
        where = ["--universal", "--python-version", inputs.python.split()[0]]
    else:
        where = ["--python-platform", inputs.platform, "--python-version", inputs.python]
    flags = [
        *where,
        "--generate-hashes",
        "--index-strategy", "first-index",
        "--no-build",
    ]  # fmt: skip
    try:
        body = _uv_compile(inputs, previous, upgrade, torch_index, uv[0], flags)
    except _UvFailed as exc:
        raise _failure(inputs, exc.stderr, torch_index) from None
    taken = _prereleases(body)
    if taken:  # a lock without one was resolved as it always was, so its header's command stays what it was
        flags, body = _named_prereleases_only(inputs, previous, upgrade, torch_index, uv[0], flags, taken)
    return body, " ".join([*uv[1:], "pip", "compile", *flags])


class _UvFailed(Exception):
    """uv pip compile exited non-zero; ``stderr`` says why."""

    def __init__(self, stderr: str):
        super().__init__(stderr)
        self.stderr = stderr


def _uv_compile(
    inputs: LockInputs,
    previous: str | None,
    upgrade: list[str],
    torch_index: str | None,
    uv_binary: str,
    flags: list[str],
) -> str:
    """The lock body uv resolves with ``flags``; raises _UvFailed."""
    locations = ["--default-index", inputs.index_url] if inputs.index_url else []
    for link in inputs.find_links:
        locations += ["--find-links", link]
    with tempfile.TemporaryDirectory(prefix="envkit-lock-") as work:
        Path(work, "pyproject.toml").write_text(_input_project(inputs, torch_index), encoding="utf-8")
        output = Path(work, "requirements.lock")
        if previous is not None:
            output.write_text(previous, encoding="utf-8")  # uv keeps the versions it finds there
        argv = [uv_binary, "pip", "compile", "pyproject.toml", "--output-file", output.name, *flags, *locations]
        argv += ["--no-header", "--no-annotate", "--no-config", "--quiet", "--color", "never"]
        # The target's Python is --python-version; naming this interpreter spares uv a
        # search (or a download) for one that --no-build never runs.
        argv += ["--python", sys.executable]
        for package in upgrade:
            argv += ["--upgrade-package", package]
        try:
            done = subprocess.run(argv, cwd=work, env=uv_env(), capture_output=True, text=True, timeout=UV_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise EnvkitError(f"{inputs.subject}: uv did not finish resolving within {UV_TIMEOUT_S} s") from None
        if done.returncode != 0:
            raise _UvFailed(done.stderr)
        return load_text(output)


def _prereleases(body: str) -> list[str]:
    """The pre-releases a lock body pins (``name==version``), in its order, each once."""
    from packaging.version import Version

    pins = dict.fromkeys(entry.split()[0].split(";")[0] for entry in requirement_entries(body))
    return [pin for pin in pins if Version(pin.partition("==")[2]).is_prerelease]


# uv's hint where a dependency's requirement names a pre-release (hydra-core 1.4.0rc3's omegaconf>=2.4.0rc1).
_NAMED_BY_A_DEPENDENCY = re.compile(r"`([^`]+)` was requested with a pre-release marker")


def _named_prereleases_only(
    inputs: LockInputs,
    previous: str | None,
    upgrade: list[str],
    torch_index: str | None,
    uv_binary: str,
    flags: list[str],
    taken: list[str],
) -> tuple[list[str], str]:
    """(flags, body) resolved again by pip's rule: a pre-release only where a requirement names one.

    uv's default strategy takes a pre-release once every release is rejected: hydra-core 1.3.2 is, under
    --no-build, because its antlr4-python3-runtime 4.9 has no wheel, so uv took 1.4.0rc3. uv's `explicit` allows
    the pre-releases the requirements name; one that a dependency names uv reports, and it is allowed in turn (the
    set grows each round, so this ends). uv's hint speaks of the ranges of its explanation, not of what was
    written, so a requirement's own package is never allowed this way: `explicit` has read its specifier itself.
    ``taken``: the pre-releases uv's default took, named if none of this resolves."""
    top_level = {requirement_name(r) for r in inputs.requirements}
    named: list[str] = []
    while True:
        strict = [*flags, "--prerelease", "explicit"]
        for name in named:
            strict += ["--prerelease-package", f"{name}=if-necessary"]
        try:
            return strict, _uv_compile(inputs, previous, upgrade, torch_index, uv_binary, strict)
        except _UvFailed as exc:
            more = sorted({normalise(n) for n in _NAMED_BY_A_DEPENDENCY.findall(exc.stderr)} - top_level - set(named))
            if not more:
                raise _prerelease_refusal(inputs, exc.stderr, taken, top_level) from None
            named += more


def _prerelease_refusal(inputs: LockInputs, stderr: str, taken: list[str], top_level: set[str]) -> EnvkitError:
    """One line: why the releases do not resolve (uv's reason), the pre-releases that would, and the ways out."""
    example = next((pin for pin in taken if normalise(pin.partition("==")[0]) in top_level), taken[0])
    return EnvkitError(
        f"{inputs.subject}: its releases do not resolve, and a lock holds a pre-release only where a requirement "
        f"names one (pip's rule): {_uv_reason(stderr)}; uv's default would take pre-releases ({', '.join(taken)}): "
        f"name the pre-release to take it (e.g. {example}), or pin releases whose dependencies all have wheels "
        "(envkit locks wheels only)"
    )


def _input_project(inputs: LockInputs, torch_index: str | None) -> str:
    lines = [
        "[project]",
        f"name = {json.dumps('envkit-lock-' + re.sub(r'[^A-Za-z0-9]+', '-', inputs.target))}",
        'version = "0"',
        f"dependencies = {json.dumps(list(inputs.requirements))}",
    ]
    if inputs.platform.startswith(UNIVERSAL):  # the Pythons it serves bound the universal resolution
        pythons = inputs.python.split()
        newest = pythons[-1].split(".")
        lines.append(f'requires-python = ">={pythons[0]},<{newest[0]}.{int(newest[1]) + 1}"')
    if torch_index:
        direct = {requirement_name(r) for r in inputs.requirements}
        lines.append("[tool.uv.sources]")
        lines += [f'{name} = {{ index = "pytorch" }}' for name in TORCH_INDEX_PACKAGES if name in direct]
        lines += ["[[tool.uv.index]]", 'name = "pytorch"', f"url = {json.dumps(torch_index)}", "explicit = true"]
    return "\n".join(lines) + "\n"


def _failure(inputs: LockInputs, stderr: str, torch_index: str | None) -> EnvkitError:
    """uv's error as one line: which index could not be reached, or why nothing resolves."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    causes = [line.removeprefix("cause:").strip() for line in lines if line.startswith("cause:")]
    fetched = next((m.group(1) for line in lines if (m := re.search(r"Failed to fetch: (\S+)", line))), None)
    unreachable = fetched and any(word in " ".join(causes) for word in ("connect", "dns", "timed out", "Connection"))
    if unreachable:
        reason = causes[-1] if causes else "no answer"
        if torch_index and fetched.startswith(torch_index.rstrip("/")):
            return TorchIndexUnreachable(
                f"{inputs.subject} cannot be locked here: PyTorch's {inputs.torch_variant} index {torch_index} "
                f"cannot be reached ({reason}); lock it where that index answers, or pass --torch-index-url MIRROR"
            )
        index = f"the package index {inputs.index_url}" if inputs.index_url else "the default package index"
        return EnvkitError(
            f"{inputs.subject}: {index} cannot be reached ({reason}, fetching {fetched}); "
            f"check the network or set the target's pip_index_url to a reachable mirror"
        )
    return EnvkitError(f"{inputs.subject}: uv cannot resolve its requirements: {_uv_reason(stderr)}")


def _uv_reason(stderr: str) -> str:
    """uv's verdict, then the first step of its explanation ("Because X was not found ..."), which names the
    culprit."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    plain = [line.removeprefix("error:").removeprefix("cause:").lstrip("×╰─▶ ").strip().rstrip(":") for line in lines]
    cause = next((line for line in plain[1:] if line.startswith("Because ")), plain[-1] if len(plain) > 1 else "")
    summary = ": ".join(part for part in (plain[0] if plain else "", cause) if part)
    return " ".join(summary.split())[:400]


class TorchIndexUnreachable(EnvkitError):
    """PyTorch's index for the target's torch build did not answer."""


def _default_index_build(target: Target) -> str:
    """For a CUDA variant of PyTorch's index: the one the default index has, which needs no second index."""
    if target.cuda is None or target.torch_variant is None:
        return ""
    matrix = load_matrix()
    release = matrix.torch_release(f"target {target.name}", target.torch)
    if release.pypi_cuda is None:
        return ""
    cuda = matrix.cuda[release.pypi_cuda].cuda
    return (
        f"; the default index's torch {target.torch} is the CUDA {cuda} build, which locks from that "
        f'index alone (cuda: "{cuda}")'
    )

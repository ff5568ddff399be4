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
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from envkit.support.atomic import write_text_atomic
from envkit.lock.base_digest import resolve_base
from envkit.project.config import ProjectConfig
from envkit.errors import EnvkitError
from envkit.lock.lockfile import TORCH_INDEX_PACKAGES, LockInputs, lock_header, lock_inputs, lock_path, normalise, read_lock

# Settings the caller's environment must not slip into a lock: only these uv
# variables pass (the cache, TLS and timeouts change no answer).
UV_ENV_KEPT = {"UV_CACHE_DIR", "UV_NATIVE_TLS", "UV_HTTP_TIMEOUT", "UV_HTTP_RETRIES", "UV_OFFLINE"}
# uv retries an unreachable index 3 times with backoff (5 s per index); once is
# enough to ride out a blip, and `envkit lock --all` stays quick where PyTorch's
# index is out of reach. UV_HTTP_RETRIES overrides it.
UV_DEFAULT_RETRIES = "1"
UV_TIMEOUT_S = 600


def lock_targets(
    config: ProjectConfig, names: list[str], upgrade: list[str], torch_index_url: str | None
) -> int:
    inputs = {name: lock_inputs(config.target(name)) for name in names}
    previous = {name: _previous_text(lock_path(config, name)) for name in names}
    _check_upgrade(config, names, upgrade)
    uv = uv_binary()
    uv_version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=False).stdout.split()[:2]
    written, failures = [], []
    for name in names:
        try:
            text = _lock_text(config, inputs[name], previous[name], upgrade, torch_index_url, (uv, *uv_version))
        except EnvkitError as exc:
            failures.append(str(exc))
            continue
        path = lock_path(config, name)
        if text != previous[name]:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomic(path, text)
            except OSError as exc:
                failures.append(f"cannot write {path}: {exc.strerror or exc}")
                continue
        state = "wrote" if text != previous[name] else "unchanged"
        written.append(f"{state} {path.relative_to(config.root)} ({len(read_lock(path).packages)} packages)")
    if written:
        print("\n".join(written))
    for failure in failures:
        print(f"envkit: error: {failure}", file=sys.stderr)
    return 2 if failures else 0


def _previous_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvkitError(f"cannot read {path}: {exc}") from None


def _check_upgrade(config: ProjectConfig, names: list[str], upgrade: list[str]) -> None:
    locks = {name: read_lock(lock_path(config, name)) for name in names}
    for package in upgrade:
        if not any(lock and normalise(package) in lock.packages for lock in locks.values()):
            where = ", ".join(str(lock_path(config, name).relative_to(config.root)) for name in names)
            raise EnvkitError(
                f"--upgrade-package {package}: no such package in {where}; name a package the lock pins "
                f"(or drop --upgrade-package to lock the target anew)"
            )


def uv_binary() -> str:
    try:
        import uv

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
    if found is None:
        raise EnvkitError("uv is not installed: envkit lock resolves with it; pip install 'envkit[dev]' (or uv)")
    return found


def _lock_text(
    config: ProjectConfig,
    inputs: LockInputs,
    previous: str | None,
    upgrade: list[str],
    torch_index_url: str | None,
    uv: tuple[str, ...],
) -> str:
    # A mirror stands in for PyTorch's index only where the target takes torch from there.
    torch_index = (torch_index_url or inputs.torch_index) if inputs.torch_index else None
    body, command = _compile(inputs, previous, upgrade, torch_index, uv)
    target = config.target(inputs.target)
    if target.is_notebook:
        from envkit.project.notebook_platforms import runtime_of

        runtime = runtime_of(target)
        recorded = f"none: runs in {target.platform}'s {runtime.name} runtime ({runtime.facts['os'].value}, glibc {runtime.glibc})"
    else:
        # After resolving: a target that cannot be locked gets its one error line, no warning.
        base = resolve_base(inputs.target, target.base_image)
        if base.note:
            print(f"envkit: warning: target {inputs.target}: {base.note}", file=sys.stderr)
        recorded = base.recorded()
    return lock_header(inputs, recorded, command, body) + body


def _compile(
    inputs: LockInputs, previous: str | None, upgrade: list[str], torch_index: str | None, uv: tuple[str, ...]
) -> tuple[str, str]:
    """(lock body, the command that resolved it); uv is (binary, "uv", version)."""
    flags = [
        "--python-platform", inputs.platform,
        "--python-version", inputs.python,
        "--generate-hashes",
        "--index-strategy", "first-index",
        "--no-build",
    ]  # fmt: skip
    locations = ["--default-index", inputs.index_url] if inputs.index_url else []
    for link in inputs.find_links:
        locations += ["--find-links", link]
    with tempfile.TemporaryDirectory(prefix="envkit-lock-") as work:
        Path(work, "pyproject.toml").write_text(_input_project(inputs, torch_index), encoding="utf-8")
        output = Path(work, "requirements.lock")
        if previous is not None:
            output.write_text(previous, encoding="utf-8")  # uv keeps the versions it finds there
        argv = [uv[0], "pip", "compile", "pyproject.toml", "--output-file", output.name, *flags, *locations]
        argv += ["--no-header", "--no-annotate", "--no-config", "--quiet", "--color", "never"]
        # The target's Python is --python-version; naming this interpreter spares uv a
        # search (or a download) for one that --no-build never runs.
        argv += ["--python", sys.executable]
        for package in upgrade:
            argv += ["--upgrade-package", package]
        try:
            done = subprocess.run(argv, cwd=work, env=_uv_env(), capture_output=True, text=True, timeout=UV_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise EnvkitError(f"target {inputs.target}: uv did not finish resolving within {UV_TIMEOUT_S} s") from None
        if done.returncode != 0:
            raise EnvkitError(_failure(inputs, done.stderr, torch_index))
        body = output.read_text(encoding="utf-8")
    command = " ".join([*uv[1:], "pip", "compile", *flags])
    return body, command


def _input_project(inputs: LockInputs, torch_index: str | None) -> str:
    lines = [
        "[project]",
        f"name = {json.dumps('envkit-lock-' + inputs.target)}",
        'version = "0"',
        f"dependencies = {json.dumps(list(inputs.requirements))}",
    ]
    if torch_index:
        direct = {normalise(re.split(r"[\[=<>!~]", r, 1)[0]) for r in inputs.requirements}
        lines.append("[tool.uv.sources]")
        lines += [f'{name} = {{ index = "pytorch" }}' for name in TORCH_INDEX_PACKAGES if name in direct]
        lines += ["[[tool.uv.index]]", 'name = "pytorch"', f"url = {json.dumps(torch_index)}", "explicit = true"]
    return "\n".join(lines) + "\n"


def _uv_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("UV_") or key in UV_ENV_KEPT}
    env.setdefault("UV_HTTP_RETRIES", UV_DEFAULT_RETRIES)
    return env


def _failure(inputs: LockInputs, stderr: str, torch_index: str | None) -> str:
    """uv's error as one line: which index could not be reached, or why nothing resolves."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    causes = [line.removeprefix("cause:").strip() for line in lines if line.startswith("cause:")]
    fetched = next((m.group(1) for line in lines if (m := re.search(r"Failed to fetch: (\S+)", line))), None)
    unreachable = fetched and any(word in " ".join(causes) for word in ("connect", "dns", "timed out", "Connection"))
    if unreachable:
        reason = causes[-1] if causes else "no answer"
        if torch_index and fetched.startswith(torch_index.rstrip("/")):
            return (
                f"target {inputs.target} cannot be locked here: PyTorch's {inputs.torch_variant} index {torch_index} "
                f"cannot be reached ({reason}); lock it where that index answers, or pass --torch-index-url MIRROR"
            )
        index = f"the package index {inputs.index_url}" if inputs.index_url else "the default package index"
        return (
            f"target {inputs.target}: {index} cannot be reached ({reason}, fetching {fetched}); "
            f"check the network or set the target's pip_index_url to a reachable mirror"
        )
    summary = " ".join(line.removeprefix("error:").strip() for line in lines[:1] + lines[-1:] if lines)
    return f"target {inputs.target}: uv cannot resolve its requirements: {' '.join(summary.split())[:400]}"

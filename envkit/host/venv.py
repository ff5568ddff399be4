"""A host virtual environment made from a lock, every file hash-checked (`envkit venv`, make's environments).

The host gets the same lock as an image: a Python the lock serves on this platform (the
first found on PATH, else one uv installs), `python -m venv` as the images make theirs, then exactly the lock's
files, each checked against its sha256, with no resolver and no dependency beyond
the lock. uv installs them (`uv pip install --require-hashes`) where it is present,
pip (`--require-hashes --no-deps`) otherwise. Last, the marker envkit-lock.json in
the venv records the lock's sha256 and the interpreter used: the recipes write the sha256
into their results, so a run on the host names the lock its interpreter was made from.

Standard library only: make runs it with the host's python3 before any environment
exists (`python3 -m envkit.host.venv requirements/dev.lock --path .venv`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from envkit.errors import EnvkitError
from envkit.host.interpreter import MARKER
from envkit.host.interpreter import version as python_version
from envkit.lock.host_platforms import PLATFORMS, this_platform
from envkit.lock.lockfile import LockFile, read_lock, requirement_entry
from envkit.project import marks
from envkit.support.atomic import write_text_atomic
from envkit.support.install_log import hash_mismatch, uv_hash_mismatch
from envkit.support.uv import find_uv

# What `python -m venv` (.gitignore since 3.13), pip (share/, etc/: packages' data files) and uv (.lock, CACHEDIR.TAG)
# leave at a venv's top, and envkit's own files: a folder holding anything else (src/, .git, train.py) is not
# only a venv, and envkit never replaces it.
VENV_ENTRIES = frozenset(
    {"bin", "include", "lib", "lib64", "share", "etc", "pyvenv.cfg", ".gitignore", ".lock", "CACHEDIR.TAG"}
    | {MARKER, marks.VENV_FILE}
)
INSTALLERS = ("auto", "uv", "pip")
# An index or --find-links page that does not answer: pip's own defaults (15 s, 5 retries with
# back-off, per page) kept `envkit venv` silent for 6.5 minutes on one unreachable page.
NETWORK_TIMEOUT_S = 20
NETWORK_RETRIES = 1
_BOUNDS = f"{NETWORK_TIMEOUT_S} s per connection, {NETWORK_RETRIES} retry"


class Sources(NamedTuple):
    """Where the lock's files come from: the index (None: the installer's default) and find-links pages."""

    index_url: str | None = None
    find_links: tuple[str, ...] = ()


class Made(NamedTuple):
    path: Path
    lock: LockFile
    python: str  # the interpreter's full version
    installer: str


def make_venv(
    lock_path: Path, path: Path, *, python: str | None = None, sources: Sources = Sources(), installer: str = "auto"
) -> Made:
    """Make ``path`` a venv holding exactly ``lock_path``; on any failure the previous ``path`` is left as it was."""
    lock = _usable_lock(lock_path)
    interpreter, version = find_python(served_pythons(lock, lock_path), python)
    _check_destination(path)
    uv = _uv_for(installer)
    locked = ["--require-hashes", "--no-deps", "-r", str(lock_path)]
    with _replacing(path):
        progress(f"making {path} with Python {version} ({interpreter})")
        _new_venv(interpreter, version, path, uv)
        tool = "uv" if uv else "pip"
        progress(f"installing the {len(lock.packages)} packages of {lock_path}, hash-checked ({_BOUNDS})")
        if uv is None and installer == "auto" and "uv" in lock.packages:
            # No uv here, but the lock pins it (the dev lock does): pip installs that one, hash-checked,
            # and it installs the rest. Cold the two take about as long; uv keeps its cache where pip's
            # may stay empty, so a venv remade after a relock takes half pip's time (benchmarks/bench_venv.py).
            with tempfile.NamedTemporaryFile("w", suffix=".lock", prefix="envkit-uv-") as entry:
                entry.write(requirement_entry(lock_path, "uv") + "\n")
                entry.flush()
                _install("pip", path, ["--require-hashes", "--no-deps", "-r", entry.name], sources)
            uv, tool = str(path / "bin" / "uv"), "uv (from the lock, by pip)"
        _install(uv or "pip", path, locked, sources)
        marker = {
            "lock": str(lock_path.resolve()),
            "lock_sha256": lock.sha256,
            "python": version,
            "interpreter": interpreter,
            "platform": lock.platform,
        }
        write_text_atomic(path / MARKER, json.dumps(marker, indent=2, sort_keys=True) + "\n")
    return Made(path, lock, version, tool)


def make_unlocked_venv(
    requirements: Path,
    wanted: tuple[str, ...],
    path: Path,
    *,
    unlocked_because: str,
    python: str | None = None,
    sources: Sources = Sources(),
) -> str:
    """Install the pins of a requirements input that has no lock here; no marker: its runs record no lock.

    pip resolves it (as the unlocked images do), with the host's pip configuration: where the build
    a pin names is only on an index this host cannot reach, a mirror configured for pip still serves it.
    """
    interpreter, version = find_python(wanted, python)
    _check_destination(path)
    with _replacing(path):
        progress(f"making {path} with Python {version} ({interpreter})")
        _new_venv(interpreter, version, path, None)  # pip resolves the pins: the venv needs its own
        progress(f"installing the pins of {requirements} with pip, unlocked: {unlocked_because} ({_BOUNDS})")
        _install("pip", path, ["-r", str(requirements)], sources)
    return version


def progress(line: str) -> None:
    """A step of a long install, as it starts: pip and uv run quiet, and a slow index is minutes of silence."""
    print(f"envkit: {line}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[None]:
    """Build at ``path``; a venv already there is set aside and comes back if the build fails or is
    stopped (Ctrl-C, or the SIGTERM or SIGHUP of a closed terminal, which would otherwise end envkit
    with the old venv set aside and a partial one in its place)."""
    whole = Path(os.path.abspath(path))  # `--path .` has no name to set aside under
    aside = whole.with_name(f".{whole.name}.replaced-{os.getpid()}") if path.exists() else None
    if aside is not None:
        path.rename(aside)
    stopped = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        if aside is not None:
            aside.rename(path)
        raise
    finally:
        for sig, handler in stopped.items():
            signal.signal(sig, handler)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _stop(signum: int, frame) -> None:
    raise KeyboardInterrupt


def _usable_lock(lock_path: Path) -> LockFile:
    lock = read_lock(lock_path)
    if lock is None:
        raise EnvkitError(f"no lock at {lock_path}: make it with `envkit lock`")
    if lock.python is None:
        raise EnvkitError(f"{lock_path} is not an envkit lock: it names no Python ('# platform: ..., python X.Y')")
    if lock.unhashed:
        raise EnvkitError(f"{lock_path}: no --hash for {', '.join(lock.unhashed)}; relock it with `envkit lock`")
    return lock


def served_pythons(lock: LockFile, lock_path: Path) -> tuple[str, ...]:
    """The Pythons (major.minor) the lock installs on here: a target's lock its one; a host lock those its
    header finds every wheel for on this platform, or one line naming the packages that have none here."""
    if not lock.universal:
        return (lock.python,)
    here = this_platform()
    served = tuple(python for (where, python), missing in lock.wheels.items() if where == here and not missing)
    if here in lock.platforms and served:
        return served
    missing = sorted({name for (where, _), names in lock.wheels.items() if where == here for name in names})
    why = f": no wheel here for {', '.join(missing)}" if missing else ""
    raise EnvkitError(
        f"{lock_path} cannot be installed on {here} ({PLATFORMS[here].title}){why}; "
        f"it serves {', '.join(lock.platforms)}"
    )


def find_python(wanted: tuple[str, ...], given: str | None = None) -> tuple[str, str]:
    """(path, full version) of the first Python among ``wanted`` (major.minor): ``given``, else this one,
    pythonX.Y or python3 on PATH, else one uv installs (`uv python install`, which honours
    UV_PYTHON_INSTALL_MIRROR)."""
    names = [given] if given else [sys.executable, *(f"python{v}" for v in wanted), "python3"]
    found = []
    for name in dict.fromkeys(names):
        path = shutil.which(name)
        version = python_version(path) if path else None
        if version and version.rsplit(".", 1)[0] in wanted:
            return path, version
        if path:
            found.append(f"{name} {version or 'that does not run'}" + (f" ({path})" if path != name else ""))
    allowed = " or ".join(wanted)
    seen = f"found {', '.join(found)}" if found else f"found no {' or '.join(dict.fromkeys(names))} on PATH"
    if given:
        raise EnvkitError(f"the lock needs Python {allowed}; {seen}: pass --python with one")
    installed, why = _uv_python(wanted[0])
    if installed:
        return installed
    raise EnvkitError(f"the lock needs Python {allowed}; {seen}, and {why}")


# Without uv, how to get a supported Python: the system's package where it has one, else uv's own installer (a
# static binary: it needs no Python), after which this fallback runs `uv python install` itself.
GET_A_PYTHON = (
    "install python{version} with the system's packages (where they have it), or uv (its standalone installer, "
    "or pipx install uv) and run this again, which then runs `uv python install {version}`; or pass --python PATH"
)


def _uv_python(version: str) -> tuple[tuple[str, str] | None, str]:
    """(path, full version) of the Python ``version`` uv installs, or (None, why not and what to do)."""
    uv = find_uv()
    if uv is None:
        return None, "no uv here to install one: " + GET_A_PYTHON.format(version=version)
    install = _completed([uv, "python", "install", version])
    if install.returncode != 0:
        why = _reason(install.stdout, f"`uv python install {version}`")
        return None, f"{why}: install one (python{version} on PATH) or pass --python PATH"
    done = subprocess.run([uv, "python", "find", version], capture_output=True, text=True, errors="replace")
    path = done.stdout.strip()
    found = python_version(path) if done.returncode == 0 and path else None
    if found is None:
        return None, f"`uv python find {version}` named no Python that runs: pass --python PATH"
    return (path, found), ""


def _new_venv(interpreter: str, version: str, path: Path, uv: str | None) -> None:
    """`python -m venv` at ``path``, then envkit's mark in it: from then on the folder is one envkit may replace.

    A Python without ensurepip (Debian's and Ubuntu's, until python3-venv is installed) cannot put pip in it: where
    uv installs the lock, the venv needs none (`--without-pip`); else one line names the package.
    """
    done = _completed([interpreter, "-m", "venv", str(path)])
    if done.returncode != 0 and "ensurepip" in done.stdout and uv is not None:
        done = _completed([interpreter, "-m", "venv", "--without-pip", str(path)])
    if done.returncode != 0 and "ensurepip" in done.stdout:
        minor = version.rsplit(".", 1)[0]
        raise EnvkitError(
            f"python -m venv failed: Python {version} ({interpreter}) has no ensurepip to put pip in a venv; "
            f"on Debian and Ubuntu install python3-venv (apt install python{minor}-venv), or install uv, with "
            "which envkit makes the venv without pip"
        )
    if done.returncode != 0:
        raise EnvkitError(_reason(done.stdout, "python -m venv"))
    mark = marks.VENV + b"envkit replaces this folder only while it holds nothing but a venv's files.\n"
    (path / marks.VENV_FILE).write_bytes(mark)


def _made_by_envkit(path: Path) -> bool:
    """Whether the folder holds envkit's mark: its own file, or the lock marker a venv made before that file had."""
    return marks.begins_with(path / marks.VENV_FILE, marks.VENV) or marks.begins_with(path / MARKER, b'"lock_sha256"')


def _check_destination(path: Path) -> None:
    # Only a venv envkit made is ever replaced: never a link (it may be someone else's venv), a file, a venv
    # made by hand (the project itself, after `python -m venv .`), or one that holds more than a venv does.
    if path.is_symlink():
        raise EnvkitError(
            f"{path} is a symbolic link: envkit venv replaces only a directory it can own; choose another --path"
        )
    if path.exists() and not path.is_dir():
        raise EnvkitError(f"{path} exists and is not a directory; choose another --path")
    if not path.is_dir() or not any(path.iterdir()):
        return
    if not _made_by_envkit(path):
        raise EnvkitError(
            f"{path} exists and is not a virtual environment envkit made (it holds no {marks.VENV_FILE}): envkit "
            "replaces only its own; remove it yourself or choose another --path"
        )
    other = sorted(entry.name for entry in path.iterdir() if entry.name not in VENV_ENTRIES)
    if other:
        shown = ", ".join(other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else "")
        raise EnvkitError(
            f"{path} holds {shown}, which a virtual environment does not: envkit replaces only a folder holding a "
            "venv's files alone; move them out or choose another --path"
        )


def _uv_for(choice: str) -> str | None:
    """The uv binary that installs the lock, or None for pip."""
    if choice not in INSTALLERS:
        raise EnvkitError(f"--installer {choice}: choose one of {', '.join(INSTALLERS)}")
    uv = find_uv() if choice != "pip" else None
    if choice == "uv" and uv is None:
        raise EnvkitError("--installer uv: uv is not installed here; pip install uv, or use --installer pip")
    return uv


def _install(installer: str, venv: Path, what: list[str], sources: Sources) -> None:
    """Install into ``venv`` with ``installer``: "pip", or the path of a uv binary."""
    python = str(venv / "bin" / "python")
    where = [
        *(["--index-url", sources.index_url] if sources.index_url else []),
        *(arg for link in sources.find_links for arg in ("--find-links", link)),
    ]
    if installer != "pip":
        # Bytecode as pip writes it, so that both installers make the same venv and first imports are quick.
        argv = [
            installer,
            "pip",
            "install",
            "--python",
            python,
            "--compile-bytecode",
            "--only-binary",
            ":all:",
            "--quiet",
            *what,
            *where,
        ]
        env = {**os.environ, "UV_HTTP_TIMEOUT": str(NETWORK_TIMEOUT_S), "UV_HTTP_RETRIES": str(NETWORK_RETRIES)}
    else:
        argv = [
            python,
            "-m",
            "pip",
            "install",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--quiet",
            f"--timeout={NETWORK_TIMEOUT_S}",
            f"--retries={NETWORK_RETRIES}",
            *what,
            *where,
        ]
        env = None
    _run(argv, f"{'pip' if installer == 'pip' else 'uv'} install", env)


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    done = _completed(argv, env)
    if done.returncode != 0:
        raise EnvkitError(_reason(done.stdout, what))


def _completed(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The child run to its end, its two streams as one (``stdout``): a failure's reason may be on either (Debian's
    venv prints its python3-venv hint on stdout, which reading stderr alone reported as "no output")."""
    return subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env,
    )


# What pip (Python's ssl) and uv (rustls) say when a certificate chain ends at a CA they do not trust: a network
# that re-signs TLS (a company proxy) makes pip report "no versions of uv==…" and uv "UnknownIssuer".
# (Compiled where a failed install's log is read, not at import: issue 42.)
_UNTRUSTED = (
    r"(?i)(certificate verify failed: [^()'\"]*[^()'\" ]|invalid peer certificate: \w+"
    r"|self[- ]signed certificate[\w ]*)"
)
TRUST_A_CA = (
    "on a network that re-signs TLS, add its CA to the system's store (update-ca-certificates), then set "
    "UV_NATIVE_TLS=1 (uv) and PIP_CERT=/etc/ssl/certs/ca-certificates.crt (pip), or point SSL_CERT_FILE (uv) and "
    "PIP_CERT (pip) at a bundle that holds it"
)


def _reason(output: str, what: str) -> str:
    """The failure as one line: a hash refusal naming the package, an untrusted certificate with how to trust its
    CA, else the tool's error and cause lines."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    mismatch = hash_mismatch(lines) or uv_hash_mismatch(lines)
    if mismatch:
        return mismatch
    untrusted = next((found.group(1).strip() for line in lines if (found := re.search(_UNTRUSTED, line))), None)
    if untrusted:
        return f"{what} failed: the index's TLS certificate is not trusted here ({untrusted}): {TRUST_A_CA}"
    errors = [line for line in lines if line.lower().startswith(("error:", "cause:", "caused by:"))]
    return f"{what} failed: " + " ".join(" ".join(errors or lines[-1:] or ["no output"]).split())[:400]


def describe(made: Made, lock_path: Path) -> str:
    return (
        f"made {made.path} from {lock_path} ({len(made.lock.packages)} packages, lock sha256 "
        f"{made.lock.sha256[:12]}) with Python {made.python}, installed by {made.installer}"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options `envkit venv` and `python -m envkit.host.venv` share."""
    parser.add_argument(
        "--python",
        metavar="PYTHON",
        help="the interpreter to make it with (default: the first of this one, pythonX.Y or python3 on PATH "
        "that the lock serves here, else one `uv python install` provides)",
    )
    parser.add_argument(
        "--installer",
        choices=INSTALLERS,
        default="auto",
        help="what installs the lock's files (default auto: uv where it is installed, else pip)",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m envkit.host.venv", description="Make a virtual environment from an envkit lock, hash-checked."
    )
    parser.add_argument("lock", type=Path, help="the lock (e.g. requirements/dev.lock)")
    parser.add_argument("--path", type=Path, required=True, help="the venv to make (a venv already there is replaced)")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        made = make_venv(args.lock, args.path, python=args.python, installer=args.installer)
    except EnvkitError as exc:
        print(f"envkit: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(describe(made, args.lock))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""envkit's notebook helper: the environment the program runs in, a fresh virtual environment holding exactly the
lock, hash-checked (``create_environment``), or the runtime's own packages and how they differ from the lock
(``runtime_environment``). Standard library only, shipped beside the helper (envkit/notebook/runtime.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

try:  # in envkit: modules of envkit.notebook
    from .runtime_shared import CPU_MODE, VENV, NotebookStop, cpu_mode, normalise, sha256_of
    from .runtime_stream import stream
except ImportError:  # in a notebook: beside envkit_notebook.py, which put its folder on sys.path
    from runtime_shared import CPU_MODE, VENV, NotebookStop, cpu_mode, normalise, sha256_of
    from runtime_stream import stream

INSTALLER = "ENVKIT_NOTEBOOK_INSTALLER"
# envkit's mark in a venv it makes and what a venv holds at its top: envkit.project.marks.VENV_FILE and VENV, and
# envkit.host.venv.VENV_ENTRIES (this module imports no envkit; tests/notebook/test_runtime.py checks they agree).
# ./venv is replaced only when a previous run made it: ENVKIT_NOTEBOOK_WORK may name the user's own folder.
VENV_FILE = "envkit-venv.txt"
VENV_MARK = b"Made by envkit venv: "
VENV_ENTRIES = frozenset(
    {"bin", "include", "lib", "lib64", "share", "etc", "pyvenv.cfg", ".gitignore", ".lock", "CACHEDIR.TAG"}
    | {"envkit-lock.json", VENV_FILE}
)


def lock_packages(lock: Path) -> dict[str, str]:
    """name -> version of every package a requirements lock pins."""
    packages = {}
    for line in Path(lock).read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)", line)
        if match:
            packages[normalise(match.group(1))] = match.group(3)
    return packages


def _clean_env(prefixes: tuple[str, ...]) -> dict[str, str]:
    # Colab's UV_* settings have broken `uv pip` (colabtools#5237, uv#12724); a platform's PIP_*
    # settings could add an index. The lock names every file by hash: nothing else may decide.
    return {key: value for key, value in os.environ.items() if not key.startswith(prefixes)}


def _installer() -> str:
    chosen = os.environ.get(INSTALLER) or ("uv" if shutil.which("uv") else "pip")
    if chosen not in ("uv", "pip"):
        raise NotebookStop(f"{INSTALLER}={chosen!r}: choose uv or pip")
    return chosen


def create_environment(settings: dict) -> dict:
    """A fresh virtual environment at ./venv holding exactly the lock, installed with hash checking."""
    lock, python, wheelhouse = _lock_to_install(settings)
    installer = _installer()
    _remove_previous_venv()
    venv_python = str(VENV / "bin" / "python")
    packages = lock_packages(lock)
    print(
        f"installing {len(packages)} packages of {lock} (sha256 {sha256_of(lock)[:12]}) into {VENV}/ "
        f"with {installer}, hash-checked, on Python {python}"
        + (" (CPU mode: offline, from the wheelhouse)" if wheelhouse else "")
    )
    if installer == "uv":
        env, steps = _uv_steps(lock, python, wheelhouse, venv_python)
    else:
        env, steps = _pip_steps(lock, python, wheelhouse, venv_python)
    for argv in steps:
        code, last = stream(argv, env)
        if code != 0:
            raise NotebookStop(f"{' '.join(argv[:3])} failed (exit {code}): {last}")
        if argv is steps[0]:  # the venv is made: marked before anything is installed into it
            (VENV / VENV_FILE).write_bytes(VENV_MARK + b"this notebook replaces the folder on its next run.\n")
    _check_holds_the_lock(venv_python, packages)
    return {
        "python": venv_python,
        "packages": "lock",
        "lock": str(lock),
        "lock_sha256": sha256_of(lock),
        "installer": _installer_version(installer),
        "lock_differences": None,
    }


def _remove_previous_venv() -> None:
    """Remove the venv a previous run made; anything else at ./venv stops the notebook, untouched."""
    if not os.path.lexists(VENV):
        return
    mark = VENV / VENV_FILE
    ours = not VENV.is_symlink() and VENV.is_dir() and mark.is_file() and not mark.is_symlink()
    if not ours or not mark.read_bytes().startswith(VENV_MARK):
        raise NotebookStop(
            f"{VENV.resolve()} is not a venv this notebook made (it holds no {VENV_FILE}): it is never replaced; "
            "move it away, or set ENVKIT_NOTEBOOK_WORK to another folder, then run this cell again"
        )
    other = sorted(entry.name for entry in VENV.iterdir() if entry.name not in VENV_ENTRIES)
    if other:
        raise NotebookStop(
            f"{VENV.resolve()} holds {', '.join(other[:5])}, which a venv does not: it is never replaced; move "
            "them out, then run this cell again"
        )
    shutil.rmtree(VENV)


def _lock_to_install(settings: dict) -> tuple[Path, str, Path | None]:
    """(the lock, the Python it is for, CPU mode's wheelhouse or None): the notebook's lock, or in CPU mode the
    wheelhouse's CPU lock on this kernel's own Python."""
    wheelhouse = cpu_mode()
    if wheelhouse is not None and not wheelhouse.is_dir():  # ENVKIT_NOTEBOOK_CPU=1 reads like a switch
        raise NotebookStop(
            f"{CPU_MODE}={wheelhouse} is not a directory: it names CPU mode's wheelhouse (a CPU "
            f"requirements.lock and its wheels), not a switch; unset it to run on the accelerator"
        )
    lock = Path(settings["lock"]["path"]) if wheelhouse is None else wheelhouse / "requirements.lock"
    if not lock.is_file():
        raise NotebookStop(f"{lock} is missing: run the cells above in order (Run all)")
    python = settings["lock"]["python"] if wheelhouse is None else f"{sys.version_info[0]}.{sys.version_info[1]}"
    return lock, python, wheelhouse


def _uv_steps(
    lock: Path, python: str, wheelhouse: Path | None, venv_python: str
) -> tuple[dict[str, str], list[list[str]]]:
    """(environment, commands) that make the venv with uv, on ``python`` (uv provides it where it is missing)."""
    offline = ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse else []
    uv_flags = ["--no-config", "--color", "never"] + (["--offline", "--no-python-downloads"] if wheelhouse else [])
    # In CPU mode the wheelhouse was built for this kernel's own interpreter.
    steps = [
        ["uv", "venv", *uv_flags, "--python", sys.executable if wheelhouse else python, str(VENV)],
        [
            "uv",
            "pip",
            "install",
            *uv_flags,
            "--python",
            venv_python,
            "--require-hashes",
            "--no-deps",
            "--only-binary",
            ":all:",
            "-r",
            str(lock),
            *offline,
        ],
    ]
    return _clean_env(("UV_",)), steps


def _pip_steps(
    lock: Path, python: str, wheelhouse: Path | None, venv_python: str
) -> tuple[dict[str, str], list[list[str]]]:
    """(environment, commands) that make the venv with this kernel's venv and pip: only on the lock's Python."""
    runtime_python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if runtime_python != python:
        raise NotebookStop(
            f"the lock is for Python {python} and this runtime has {runtime_python}: uv provides "
            f"that Python, but uv is not installed here: pip install uv, then run this cell again"
        )
    offline = ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse else []
    steps = [
        [sys.executable, "-m", "venv", str(VENV)],
        [
            venv_python,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--require-hashes",
            "--no-deps",
            "--only-binary=:all:",
            "-r",
            str(lock),
            *offline,
        ],
    ]
    return {**_clean_env(("PIP_",)), "PIP_CONFIG_FILE": os.devnull}, steps


def _check_holds_the_lock(venv_python: str, packages: dict[str, str]) -> None:
    """The venv holds every package of the lock at its version (the installer's own besides, named)."""
    installed = _venv_distributions(venv_python)
    missing = {name: version for name, version in packages.items() if installed.get(name) != version}
    if missing:
        raise NotebookStop(
            f"{VENV}/ does not hold the lock: {', '.join(f'{n}=={v}' for n, v in sorted(missing.items()))}"
        )
    extra = sorted(set(installed) - set(packages))
    print(
        f"{VENV}/ holds exactly the lock's {len(packages)} packages"
        + (f", plus the installer's {', '.join(extra)}" if extra else "")
    )


def _venv_distributions(python: str) -> dict[str, str]:
    script = (
        "import json, importlib.metadata as m; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    done = subprocess.run([python, "-E", "-s", "-c", script], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NotebookStop(f"{python} does not run: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return {normalise(name): version for name, version in json.loads(done.stdout).items()}


def _installer_version(installer: str) -> str:
    argv = ["uv", "--version"] if installer == "uv" else [sys.executable, "-m", "pip", "--version"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=_clean_env(("UV_",)))
    return " ".join(done.stdout.split()[:2]) or installer


def runtime_environment(settings: dict) -> dict:
    """The runtime's own packages (this kernel's interpreter), and how they differ from the lock."""
    wheelhouse = cpu_mode()
    lock = Path(settings["lock"]["path"]) if wheelhouse is None else wheelhouse / "requirements.lock"
    installed = {normalise(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}
    differences = [
        {"package": name, "lock": version, "runtime": installed.get(name)}
        for name, version in sorted(lock_packages(lock).items())
        if installed.get(name) != version
    ]
    print(
        f"running on this runtime's packages ({sys.executable}), not the lock: "
        f"{len(differences)} of {len(lock_packages(lock))} locked packages differ"
    )
    for entry in differences:
        print(f"  {entry['package']}: lock {entry['lock']}, runtime {entry['runtime'] or 'not installed'}")
    return {
        "python": sys.executable,
        "packages": "runtime",
        "lock_sha256": sha256_of(lock),
        "installer": None,
        "lock_differences": differences,
    }

"""Hostile input as a corpus (tests/hostile/cases.yaml): one line, the right exit status, nothing changed.

Each case runs `envkit` in-process (a traceback would fail the test as an uncaught exception) in a
fresh copy of the project, with no Docker engine answering and a cache outside the copy. The copy's
every file, with its bytes and modification time, must be the same afterwards, and no file added.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from paths import REPO_ROOT, TESTS
from project_copy import copy_project

from envkit.cli import main

CASES = yaml.safe_load((TESTS / "hostile" / "cases.yaml").read_text(encoding="utf-8"))
RESULTS = REPO_ROOT / "tests" / "data" / "results" / "mixed" / "mnist-cpu-b.json"


def test_the_corpus_is_well_formed():
    ids = [case["id"] for case in CASES]
    assert len(ids) == len(set(ids)) >= 60
    known = {"id", "argv", "config", "files", "edit", "env", "exit", "message"}
    for case in CASES:
        assert set(case) <= known and {"id", "argv", "message"} <= set(case), case["id"]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """The project's files a user has after a clone (envkit.yaml, templates, recipes, docker/, notebooks/)."""
    return copy_project(tmp_path_factory.mktemp("pristine"))


def _merge(document: dict, changes: dict) -> dict:
    merged = copy.deepcopy(document)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# What stands at a path instead of a file: made by _write, with no bytes of its own.
SPECIAL = {"fifo", "symlink", "directory", "unreadable"}


def _content(spec) -> bytes | int | tuple[str, object]:
    """A file's bytes from its corpus spec (an int: a sparse file of that size; a pair: a special file)."""
    if isinstance(spec, str):
        return spec.encode("utf-8")
    ((kind, value),) = spec.items()
    if kind in SPECIAL:
        return kind, value
    if kind == "json":
        return json.dumps(value).encode()
    if kind == "results":
        return json.dumps(_merge(json.loads(RESULTS.read_text()), value)).encode()
    if kind == "nested":
        return b"[" * value + b"]" * value
    if kind == "digits":
        return b'{"schema_version": ' + b"1" * value + b"}"
    if kind == "bytes":
        return value.encode("latin-1")
    if kind == "sparse":
        return value
    raise AssertionError(f"unknown file spec {kind}")


def _write(path: Path, content: bytes | int | tuple[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, tuple):
        kind, value = content
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "symlink":  # to a path (/dev/zero), to itself (a loop), or to nothing (dangling)
            os.symlink(value, path)
        elif kind == "directory":
            path.mkdir()
        else:  # unreadable (mode 000; root runs the case without its read overrides): a file, or a directory for null
            path.mkdir() if value is None else path.write_text(value)
            path.chmod(0)
    elif isinstance(content, int):
        with path.open("wb") as stream:
            stream.truncate(content)
    else:
        path.write_bytes(content)


def _configure(config: Path, change: dict) -> None:
    ((kind, value),) = change.items()
    text = config.read_text(encoding="utf-8")
    if kind == "replace":
        old, new = value
        assert old in text, f"{old!r} is not in envkit.yaml"
        config.write_text(text.replace(old, new, 1), encoding="utf-8")
    elif kind == "append":
        config.write_text(text + value, encoding="utf-8")
    elif kind == "text":
        config.write_text(value, encoding="utf-8")
    elif kind == "nested":
        config.write_text(text + "deep: " + "[" * value + "]" * value + "\n", encoding="utf-8")
    elif kind == "digits":
        config.write_text(text + "big: " + "1" * value + "\n", encoding="utf-8")
    elif kind == "bytes":
        config.write_bytes(value.encode("latin-1"))
    else:
        raise AssertionError(f"unknown config change {kind}")


def snapshot(root: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every file: mode, size, modification time and (for small files this user may read) a digest of the bytes.

    A case's mode-000 file is unreadable to an ordinary user (root reads it anyway): its mode, size and time
    still show any change."""
    import hashlib

    state = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            stat = path.stat()
            readable = stat.st_size < 2**20 and os.access(path, os.R_OK)
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if readable else ""
            state[path.relative_to(root).as_posix()] = (stat.st_mode, stat.st_size, stat.st_mtime_ns, digest)
        else:
            state[path.relative_to(root).as_posix() + "/"] = (0, 0, 0, "")
    return state


def _unreadable(case: dict) -> bool:
    return any(isinstance(spec, dict) and "unreadable" in spec for spec in (case.get("files") or {}).values())


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_CAPABILITY_VERSION_3 = 0x20080522  # linux/capability.h: two _CapData, capabilities 0-31 in the first
_READ_OVERRIDES = 1 << 1 | 1 << 2  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH


@contextlib.contextmanager
def _without_read_override(active: bool):
    """Root reads a mode-000 file: a case with an unreadable file runs with root's two capabilities that pass over
    file modes out of this thread's effective set, so a file root owns with mode 000 is unreadable to it too.
    Root stays root (before: the case ran as nobody, who could not reach a repository under /root, mode 700)."""
    if not active:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = _CapHeader(_CAPABILITY_VERSION_3, 0), (_CapData * 2)()

    def capset(effective: int) -> None:
        data[0].effective = effective
        if libc.capset(ctypes.byref(header), data) != 0:
            raise OSError(ctypes.get_errno(), "capset")

    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    effective = data[0].effective
    capset(effective & ~_READ_OVERRIDES)
    try:
        yield
    finally:
        capset(effective)


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_hostile_input_is_one_line_and_changes_nothing(case, pristine, tmp_path, monkeypatch, capsys):
    project = tmp_path / "project"
    shutil.copytree(pristine, project)
    if "config" in case:
        _configure(project / "envkit.yaml", case["config"])
    if "edit" in case:
        edited = project / case["edit"]["file"]
        old, new = case["edit"]["replace"]
        assert old in edited.read_text(), f"{old!r} is not in {case['edit']['file']}"
        edited.write_text(edited.read_text().replace(old, new, 1))
    for name, spec in (case.get("files") or {}).items():
        _write(project / name, _content(spec))
    monkeypatch.chdir(project)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    for name, value in (case.get("env") or {}).items():
        monkeypatch.setenv(name, value)
    before = snapshot(project)

    try:
        with _without_read_override(_unreadable(case) and os.geteuid() == 0):
            code = main([str(word) for word in case["argv"]])
    except SystemExit as exit_:  # argparse's own refusals
        code = exit_.code
    out, err = capsys.readouterr()

    assert code == case.get("exit", 2), (out, err)
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, err
    assert case["message"] in err, err
    assert "set_int_max_str_digits" not in err, "Python's advice to programmers reached a user"
    assert snapshot(project) == before, "a file of the project was created, changed or touched"

"""Every read of a project or user file goes through envkit.support.bounded_load (issue 28 §8–§11).

A scan of envkit's source for the ways Python reads a file (Path.read_text/read_bytes, open(),
Path.open, os.open, json.load, yaml.load, tarfile/gzip opened on a path, hashlib.file_digest):
each is a read that skips the 16 MiB cap and the regular-file check, so a 2 GB envkit.yaml, a
FIFO named x.json or a symlink to /dev/zero would be read whole, or wait forever. Files that are
only hashed count too. Opening for writing is not a read. The few reads left are listed below,
each with why the bounded reader is not the one to use.
"""

from __future__ import annotations

import ast
import hashlib
import os
from pathlib import Path

import pytest

from envkit.support import bounded_load, provenance
from envkit.support.bounded_load import Refused, hash_file, read_bytes, read_text, sha256

PACKAGE = Path(bounded_load.__file__).resolve().parent.parent

# (module, enclosing function) -> why it reads a file another way.
ALLOWED = {
    ("support/bounded_load.py", "open_regular"): "the bounded reader itself",
    ("support/bounded_load.py", "parse_yaml_kept"): "envkit's own cache entry (keep(): 0600 in a 0700 folder), read "
    "unrecorded: a render memo keys on the document the entry was parsed from, not on the cache",
    ("support/bounded_load.py", "source_digest"): "envkit's own modules, hashed into a kept document's key",
    **{
        (f"notebook/{module}.py", "*"): "runs inside a notebook (standard library only): it cannot import envkit"
        for module in ("runtime_shared", "runtime_accelerator", "runtime_venv")
    },
    **{
        (f"support/{module}.py", "*"): "the run wrapper ships beside a command where envkit is not installed"
        for module in provenance.MODULES
    },
    ("image/inventory.py", "from_saved_tarball"): "an image tarball (gigabytes) streamed through tarfile, never held",
    ("image/archive.py", "load"): "the image tarball is streamed to the engine after its sha256 was checked",
    ("runs/plot.py", "_write_stacked"): "decodes the PNG tiles matplotlib has just drawn, in memory (io.BytesIO)",
    ("project/archives.py", "_in_zip"): "a zip's members streamed through the secret scan, bounded by their count "
    "and declared sizes (archives.MAX_MEMBERS, MAX_UNPACKED)",
}

READ_METHODS = {"read_text", "read_bytes"}
OPENERS = {"open"}  # builtins.open, Path.open, tarfile.open, gzip.open, ...


def _writes(call: ast.Call) -> bool:
    """open(..., "w"), Path.open("a"), os.open(..., O_WRONLY|...): opening for writing."""
    modes = [arg for arg in call.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
    modes += [kw.value for kw in call.keywords if kw.arg == "mode" and isinstance(kw.value, ast.Constant)]
    flags = {node.attr for arg in call.args for node in ast.walk(arg) if isinstance(node, ast.Attribute)}
    return any(set(str(mode.value)) & set("wax") for mode in modes) or bool(flags & {"O_WRONLY", "O_RDWR"})


def _reads(tree: ast.AST):
    """(function, line, what) for every file read in a module."""
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node

    def function(node: ast.AST) -> str:
        while node in parents:
            node = parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node.name
        return "<module>"

    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func
        name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
        owner = callee.value.id if isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) else ""
        if owner == "bounded_load":
            continue
        found = None
        if isinstance(callee, ast.Attribute) and name in READ_METHODS:
            found = f".{name}()"
        elif name in OPENERS and not _writes(node) and not any(kw.arg == "fileobj" for kw in node.keywords):
            found = f"{owner + '.' if owner else ''}open()"
        elif (owner, name) in {("json", "load"), ("yaml", "load"), ("yaml", "safe_load"), ("hashlib", "file_digest")}:
            found = f"{owner}.{name}()"
        if found:
            yield function(node), (node.lineno, node.col_offset), found


def unbounded_reads(package: Path = PACKAGE) -> list[str]:
    problems = []
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package).as_posix()
        for where, (line, _), what in sorted(_reads(ast.parse(path.read_text(encoding="utf-8"))), key=lambda r: r[1]):
            if (module, where) not in ALLOWED and (module, "*") not in ALLOWED:
                problems.append(f"envkit/{module}:{line}: {what} in {where}")
    return problems


def test_every_file_envkit_reads_goes_through_the_bounded_reader():
    assert unbounded_reads() == [], "read these through envkit.support.bounded_load (or list them with a reason)"


def test_every_allowed_read_is_still_there():
    """An allowance whose read is gone would let a new read in unseen."""
    present = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for where, _, _ in _reads(ast.parse(path.read_text(encoding="utf-8"))):
            present.update({(module, where), (module, "*")})
    assert set(ALLOWED) <= present, set(ALLOWED) - present


def test_the_scan_finds_each_kind_of_read(tmp_path):
    """The scan itself: each way of reading a file is found, writing is not."""
    module = tmp_path / "pkg" / "mod.py"
    module.parent.mkdir()
    module.write_text(
        "import json, hashlib, tarfile\n"
        "def a(p):\n    return p.read_text()\n"
        "def b(p):\n    return p.read_bytes()\n"
        "def c(p):\n    with open(p) as f:\n        return json.load(f)\n"
        "def d(p):\n    return p.open('rb').read()\n"
        "def e(p):\n    return hashlib.file_digest(p.open('rb'), 'sha256')\n"
        "def f(p):\n    return tarfile.open(p)\n"
        "def w(p):\n    open(p, 'w').write('x'); p.open(mode='ab'); tarfile.open(fileobj=p)\n"
        "def x(p):\n    os.open(p, os.O_WRONLY); os.open(p, os.O_RDONLY)\n"
    )
    found = unbounded_reads(tmp_path)
    assert [line.split(" in ")[-1] for line in found] == ["a", "b", "c", "c", "d", "e", "e", "f", "x"], found


def _fifo(tmp_path: Path) -> Path:
    fifo = tmp_path / "x.json"
    os.mkfifo(fifo)
    return fifo


@pytest.mark.parametrize(
    "make, reason",
    [
        (_fifo, "a FIFO (named pipe), not a regular file"),
        (lambda tmp_path: Path("/dev/zero"), "a character device, not a regular file"),
        (lambda tmp_path: tmp_path, "a directory, not a regular file"),
    ],
    ids=["fifo", "dev-zero", "directory"],
)
@pytest.mark.parametrize("read", [read_text, read_bytes, sha256, lambda p: hash_file(p, hashlib.sha256(), None)])
def test_what_is_not_a_regular_file_is_refused_unread(tmp_path, make, reason, read):
    """At once: a FIFO with no writer would block open() and read() forever."""
    with pytest.raises(Refused, match=reason.replace("(", r"\(").replace(")", r"\)")):
        read(make(tmp_path))


@pytest.mark.parametrize("read", [read_text, read_bytes, sha256])
def test_a_sparse_file_past_the_cap_is_refused_unread(tmp_path, read):
    big = tmp_path / "envkit.yaml"
    with big.open("wb") as stream:
        stream.truncate(2 * 2**30)
    with pytest.raises(Refused, match="larger than 16 MiB"):
        read(big)


def test_text_with_a_nul_byte_is_refused(tmp_path):
    binary = tmp_path / "bench.in"
    binary.write_bytes(b"torch==2.9.0\n\0\0")
    with pytest.raises(Refused, match="not text: a NUL byte at byte 13"):
        read_text(binary)

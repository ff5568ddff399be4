"""envkit.support.atomic: the one way envkit writes a file (all of it or none of it)."""

from __future__ import annotations

import os

import pytest

from envkit.support import atomic
from envkit.support.atomic import atomic_stream, write_bytes_atomic, write_text_atomic


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_text_is_utf8_with_newlines_as_given_and_no_temp_file_is_left(tmp_path):
    target = tmp_path / "out.txt"
    write_text_atomic(target, "größe\r\nzwei\n")
    assert target.read_bytes() == "größe\r\nzwei\n".encode()
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_mode_is_set_when_asked_and_otherwise_what_open_would_give(tmp_path):
    script = tmp_path / "run.sh"
    write_text_atomic(script, "#!/bin/sh\n", mode=0o755)
    assert script.stat().st_mode & 0o777 == 0o755
    fresh = tmp_path / "new.json"
    write_bytes_atomic(fresh, b"{}")
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask()  # not mkstemp's 0600
    script.chmod(0o700)
    write_text_atomic(script, "#!/bin/sh\necho\n")
    assert script.stat().st_mode & 0o777 == 0o700, "replacing a file keeps its mode"


def test_a_failure_while_writing_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "results.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_stream(target) as stream:
            stream.write(b"half of the new")
            raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_the_bytes_are_fsynced_before_the_rename(tmp_path, monkeypatch):
    events = []
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: events.append("fsync"))
    real_replace = os.replace
    monkeypatch.setattr(atomic.os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b)))
    write_bytes_atomic(tmp_path / "x", b"data")
    assert events == ["fsync", "replace"]


def test_an_unwritable_directory_is_an_oserror_and_writes_nothing(tmp_path):
    missing = tmp_path / "no" / "such" / "dir" / "file"
    with pytest.raises(FileNotFoundError):
        write_text_atomic(missing, "x")
    assert list(tmp_path.iterdir()) == []

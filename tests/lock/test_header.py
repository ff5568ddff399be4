"""A lock's header (envkit.lock.header): it begins with the mark by which envkit knows its own locks."""

from __future__ import annotations

import pytest

from envkit.lock import header
from envkit.lock.inputs import LockInputs
from envkit.project import marks


def inputs(source: str, target: str) -> LockInputs:
    return LockInputs(target, ("numpy",), "x86_64-manylinux_2_36", "3.12", None, None, None, (), source)


@pytest.mark.parametrize(
    "source, target, mark", [("target", "cpu", "LOCK"), ("requirements", "requirements/dev.in", "ANY_LOCK")]
)
def test_the_header_begins_with_marks_own_lock_mark(monkeypatch, source, target, mark):
    """marks owns the text: a lock written after it changes is still one envkit knows as its own (8ffae08's split)."""
    written = header.lock_header(inputs(source, target), None, "envkit lock", "")
    assert written.encode().startswith(getattr(marks, mark))
    monkeypatch.setattr(marks, "ANY_LOCK", b"# envkit's lock, for ")
    monkeypatch.setattr(marks, "LOCK", b"# envkit's lock, for target ")
    written = header.lock_header(inputs(source, target), None, "envkit lock", "")
    assert written.startswith(getattr(marks, mark).decode() + ('"cpu": ' if source == "target" else target + ": "))

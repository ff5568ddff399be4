"""Where the tests find the repository: one definition, whatever folder a test file lives in."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO_ROOT = TESTS.parent
DATA = TESTS / "data"
GOLDEN = TESTS / "golden"

"""Golden files of envkit report's output (tests/golden/report/), shared by the report and experiment tests."""

from __future__ import annotations

from paths import GOLDEN

REPORT = GOLDEN / "report"


def check_golden(name: str, text: str, update: bool) -> None:
    path = REPORT / name
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name} differs (rerun with --update-golden if intended)"

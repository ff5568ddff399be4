"""Which detect-secrets release judges, and envkit.yaml's values found clean, kept between commands (issue 42).

envkit.project.secrets reads a value with some fifty patterns, compiled at its first check, and its import alone
(its rules, base64, codecs, string) costs a render or an experiment about 5 ms: an unchanged envkit.yaml, found
clean once, is not read again, and that module is imported only where a value is new.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

# The documents (envkit.yaml, an experiments file, each as it was) whose values envkit's cache remembers clean.
ENTRIES = 512
# What judges a value: a change to either is another verdict. Found, not imported (see above).
RULE_SOURCES = tuple(importlib.util.find_spec(f"envkit.project.{name}").origin for name in ("secrets", "detectors"))


def in_values_once(values, judge: Callable[[object], tuple[str, str] | None]) -> tuple[str, str] | None:
    """``judge``'s verdict on ``values`` (envkit.project.secrets.in_values), a clean one kept in envkit's cache by the
    values and the rules that judged them, so that ``judge`` (and the module it imports) is called only where no
    clean verdict is kept. A secret found is never kept: it is found, and said, every time; nothing is kept where
    another detect-secrets release than the shipped patterns' judges (or none, said on stderr at every check)."""
    if not shipped_release_installed():
        return judge(values)
    from envkit.support.bounded_load import source_digest
    from envkit.support.cache import remembered

    rules = " ".join(source_digest(source) for source in RULE_SOURCES)
    found = None

    def clean() -> bool:
        nonlocal found
        found = judge(values)
        return found is None

    remembered("clean-values", f"{rules}\n{values!r}", clean, at_most=ENTRIES)
    return found


@functools.cache
def shipped_release_installed() -> bool:
    """Whether the detect-secrets release envkit/project/detectors.py was generated from is the one installed."""
    from envkit.project import detectors

    spec = importlib.util.find_spec("detect_secrets")
    # its distribution's metadata beside it names the version, found without importlib.metadata (50 ms)
    shipped = f"detect_secrets-{detectors.VERSION}.dist-info"
    return bool(spec and spec.origin and os.path.isdir(Path(spec.origin).parent.parent / shipped))

"""envkit's data tables: where they live (DATA_DIR), and loading a document checked against its JSON Schema."""

from __future__ import annotations

import functools
import hashlib
import marshal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envkit.errors import EnvkitError
from envkit.project import validators
from envkit.support.bounded_load import load_json, load_text, load_yaml

# The one place that knows where envkit/data/ is; every module names its file relative to it.
DATA_DIR = Path(__file__).resolve().parent.parent / "data"
# envkit's own YAML tables parsed ahead of time, each with the sha256 of the text parsed (scripts/generate_validators.py
# writes it; tests/project/test_validators.py regenerates and compares).
TABLES = DATA_DIR / "tables.json"
TABLE_NAMES = ("kinds.yaml", "matrix.yaml", "notebook_platforms.yaml", "base_glibc.yaml")


def load_table(path: Path) -> Any:
    """envkit's own YAML table at ``path`` (one of TABLE_NAMES), unchecked (its tests check it): as parsed ahead of
    time while its text is the one parsed, else parsed now (an edited copy)."""
    # Each caller gets its own objects, as from YAML: a copy of the table parsed once (marshal copies it whole).
    kept = _shipped_tables().get(path.name) if path.parent == DATA_DIR else None
    parsed = marshal.loads(kept) if kept is not None else None
    if parsed is not None and parsed["sha256"] == hashlib.sha256(load_text(path).encode()).hexdigest():
        return parsed["data"]  # JSON: a tenth of the time PyYAML takes over the same table (issue 42)
    return load_yaml(path)


@functools.cache
def _shipped_tables() -> dict[str, bytes]:
    """tables.json's tables, read once per process by the bounded reader (envkit's own file: not walked for its
    depth, parse_json), each kept as marshal's bytes."""
    return {name: marshal.dumps(table) for name, table in load_json(TABLES, walk=False)["tables"].items()}


def load_checked(path: Path, schema_path: Path, load: Callable[[Path], Any] = load_yaml) -> Any:
    """The document at ``path`` (YAML, or what ``load`` reads); a malformed table is one line naming where."""
    data = load(path)
    check(path, schema_path, data)
    return data


def check(path: Path, schema_path: Path, data: Any) -> None:
    """Check ``data``, read from ``path``, against the JSON Schema at ``schema_path``: one line naming where.

    The check is the validator generated from that schema (scripts/generate_validators.py); jsonschema words the
    error once it rejects."""
    if not validators.valid(schema_path.name, data):
        _validate(path, load_json(schema_path), data)


def _validate(path: Path, schema: dict, data: Any) -> None:
    import jsonschema  # only for a document the generated validator rejected: render must not pay for it

    from envkit.project import secrets  # likewise (a clean envkit.yaml's verdict is kept: secret_verdicts)

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(data))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "top level"
        # the message quotes what the schema rejects: envkit.yaml's experiments are checked for secrets after it
        raise EnvkitError(secrets.concealed(f"{path}: {where}: {error.message}", data))

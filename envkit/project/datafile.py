"""envkit's data tables: where they live (DATA_DIR) and loading one checked against its JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envkit.support.cache import schema_checked
from envkit.errors import EnvkitError

# The one place that knows where envkit/data/ is; every module names its file relative to it.
DATA_DIR = Path(__file__).resolve().parent.parent / "data"


def load_checked(path: Path, schema_path: Path) -> Any:
    """The YAML document at ``path``; a malformed table is one line naming where."""
    import yaml  # here, not at the top: the lock-file reader imports DATA_DIR with the stdlib alone

    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError) as exc:
        raise EnvkitError(f"{path}: cannot read: {' '.join(str(exc).split())}") from None
    schema = schema_path.read_bytes()
    schema_checked(schema, data, lambda: _validate(path, json.loads(schema), data))
    return data


def _validate(path: Path, schema: dict, data: Any) -> None:
    import jsonschema  # only on a cache miss: render must not pay for the import

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(data))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "top level"
        raise EnvkitError(f"{path}: {where}: {error.message}")

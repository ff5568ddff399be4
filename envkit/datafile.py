"""Load one of envkit's data tables (envkit/data/*.yaml) checked against its JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from envkit.errors import EnvkitError


def load_checked(path: Path, schema_path: Path) -> Any:
    """The YAML document at ``path``; a malformed table is one line naming where."""
    import jsonschema  # only the commands that read a table pay for the import

    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError) as exc:
        raise EnvkitError(f"{path}: cannot read: {' '.join(str(exc).split())}") from None
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(data))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "top level"
        raise EnvkitError(f"{path}: {where}: {error.message}")
    return data

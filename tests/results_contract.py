"""Check a recipe's results JSON against the results contract, envkit/data/results.schema.json.

Recipe tests call ``assert_valid_results(path_or_document)`` on what a recipe wrote. It reads the
schema file itself (not envkit's reader, which upgrades old files first), so it checks exactly
what the recipes write today.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from paths import REPO_ROOT

SCHEMA_PATH = REPO_ROOT / "envkit" / "data" / "results.schema.json"


def results_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def contract_errors(document: dict) -> list[str]:
    """Every way ``document`` breaks the contract, one line each (none when it keeps it)."""
    validator = jsonschema.Draft202012Validator(results_schema())
    problems = [
        f"{'.'.join(map(str, error.absolute_path)) or 'top level'}: {error.message}"
        for error in sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.absolute_path)))
    ]
    distributions = (document.get("environment") or {}).get("distributions")
    # JSON Schema cannot say "sorted"; the contract does (same interpreter -> same bytes).
    if isinstance(distributions, list) and distributions != sorted(distributions):
        problems.append("environment.distributions: not sorted")
    return problems


def assert_valid_results(document_or_path: dict | str | Path) -> dict:
    """Fail with every contract violation listed; return the document for further checks."""
    if isinstance(document_or_path, dict):
        document = document_or_path
    else:
        document = json.loads(Path(document_or_path).read_text(encoding="utf-8"))
    problems = contract_errors(document)
    assert not problems, "results break envkit/data/results.schema.json:\n" + "\n".join(problems)
    return document

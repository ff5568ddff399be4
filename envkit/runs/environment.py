"""A results file's environment as `envkit diff` compares it: an inventory, like an image's.

Not in envkit.runs.results: the notebooks carry that module (and what it imports) for their report.
"""

from __future__ import annotations

from pathlib import Path

from envkit.errors import EnvkitError
from envkit.image import inventory
from envkit.runs import results
from envkit.support.bounded_load import read_text


def results_inventory(path: Path) -> inventory.Inventory:
    """The environment a results file records, read as strictly as `envkit report` reads it (its schema, its
    version)."""
    try:
        result, note = results.parse(path, read_text(path))
    except OSError as exc:
        raise EnvkitError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise EnvkitError(f"{path} is not a results file envkit reads: {exc}") from None
    return inventory.from_environment(str(path), result.environment, (f"{path}: {note}",) if note else ())

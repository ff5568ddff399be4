"""Read the recipes' results JSON (docs/design.md §5) into validated records.

A results directory collects files from many runs, envkit versions and hosts, so
reading is forgiving: a file that is not a results file is skipped with one
warning naming it, and older layouts are upgraded to the current one before
validation so the report code only ever sees schema version 1.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import jsonschema

from envkit.errors import EnvkitError

SCHEMA_VERSION = 1
KNOWN_RECIPES = ("cifar", "mnist")
# steady_epoch_s: epochs after the first (recipes add it; compilation makes the first slow on XLA)
STAT_KEYS = ("iter_s", "epoch_s", "steady_epoch_s", "train_epoch_s", "test_epoch_s")
CONFIGURATION_KEYS = (
    "device", "cores", "strategy", "parallel", "world_size", "model",
    "global_batch", "per_device_batch", "image_size", "dataset",
)
ENVIRONMENT_KEYS = (
    "host", "device_type", "device_name", "device_count", "python", "torch",
    "torchvision", "torch_xla", "cuda", "image", "git_revision",
)

_STAT = {
    "type": "object",
    "required": ["mean", "std", "n"],
    "properties": {
        "mean": {"type": "number", "minimum": 0},
        "std": {"type": "number", "minimum": 0},
        "n": {"type": "integer", "minimum": 0},
    },
}
_OPTIONAL_INT = {"type": ["integer", "null"]}
_OPTIONAL_STR = {"type": ["string", "null"]}

# Only what the report reads is required; recipes may add fields freely.
RESULTS_SCHEMA = {
    "type": "object",
    "required": ["recipe", "run_name", "configuration", "timing", "metrics", "environment"],
    "properties": {
        "recipe": {"enum": list(KNOWN_RECIPES)},
        "run_name": {"type": "string"},
        "configuration": {
            "type": "object",
            "required": ["device", "world_size", "model", "global_batch", "dataset"],
            "properties": {
                "device": {"enum": ["cpu", "cuda", "tpu"]},
                "cores": _OPTIONAL_INT,
                "strategy": {"enum": ["single", "xmp", "spmd", None]},
                "parallel": {"enum": ["none", "dp", "ddp", None]},
                "world_size": {"type": "integer", "minimum": 1},
                "model": {"type": "string"},
                "global_batch": {"type": "integer", "minimum": 1},
                "per_device_batch": _OPTIONAL_INT,
                "image_size": _OPTIONAL_INT,
                "dataset": {"enum": ["real", "fake"]},
            },
        },
        "timing": {
            "type": "object",
            "required": ["total_s", "first_epoch_s", "epoch_s"],
            "properties": {
                "total_s": {"type": "number", "minimum": 0},
                "first_epoch_s": {"type": "number", "minimum": 0},
                **{key: _STAT for key in STAT_KEYS},
            },
        },
        "metrics": {
            "type": "object",
            "properties": {"test_accuracy": {"type": ["number", "null"], "minimum": 0, "maximum": 1}},
        },
        "environment": {
            "type": "object",
            "properties": {key: _OPTIONAL_STR for key in ENVIRONMENT_KEYS if key != "device_count"},
        },
    },
}


@dataclass(frozen=True)
class Stat:
    mean: float
    std: float
    n: int


@dataclass(frozen=True)
class RunResult:
    path: Path
    recipe: str
    run_name: str
    configuration: dict
    timing: dict  # total_s, first_epoch_s: float; STAT_KEYS present: Stat
    test_accuracy: float | None
    environment: dict  # every ENVIRONMENT_KEYS entry, None where unknown


def stat_of(values: list[float]) -> dict:
    """Population mean/std, the same statistic the recipes record."""
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return {"mean": mean, "std": std, "n": len(values)}


def upgrade(document: dict) -> tuple[dict, str | None]:
    """Bring a document to schema version 1; return it and an optional note.

    Version 0 (files written before the contract, no ``schema_version``) kept
    the raw per-iteration / per-epoch seconds as lists and had no
    ``configuration`` block: its fields were read from ``settings``.
    """
    version = document.get("schema_version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError(f"schema_version must be an integer, got {version!r}")
    if version > SCHEMA_VERSION:
        note = f"schema_version {version} is newer than this envkit reads ({SCHEMA_VERSION}); using the fields it knows"
        return document, note
    if version == SCHEMA_VERSION:
        return document, None
    upgraded = dict(document, schema_version=SCHEMA_VERSION)
    timing = dict(document.get("timing") or {})
    for key in STAT_KEYS:
        if isinstance(timing.get(key), list) and timing[key]:
            timing[key] = stat_of(timing[key])
    upgraded["timing"] = timing
    if "configuration" not in document:
        settings = document.get("settings") or {}
        upgraded["configuration"] = {key: settings.get(key) for key in CONFIGURATION_KEYS}
    upgraded.setdefault("environment", {})
    return upgraded, None


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(part) for part in error.absolute_path) or "top level"


def parse(path: Path, text: str) -> tuple[RunResult, str | None]:
    """Parse one file's text; raise ValueError with a one-line reason when unusable."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON, partial or malformed ({exc.msg}: line {exc.lineno} column {exc.colno})") from None
    if not isinstance(document, dict):
        raise ValueError("not a results object")
    document, note = upgrade(document)
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(RESULTS_SCHEMA).iter_errors(document))
    if error is not None:
        raise ValueError(f"{_where(error)}: {error.message}")
    timing = {
        "total_s": float(document["timing"]["total_s"]),
        "first_epoch_s": float(document["timing"]["first_epoch_s"]),
    }
    for key in STAT_KEYS:
        value = document["timing"].get(key)
        # n == 0: the run measured nothing of this kind (e.g. stopped by --max-steps).
        if value is not None and value["n"] > 0:
            timing[key] = Stat(float(value["mean"]), float(value["std"]), int(value["n"]))
    environment = document["environment"]
    result = RunResult(
        path=path,
        recipe=document["recipe"],
        run_name=document["run_name"],
        configuration={key: document["configuration"].get(key) for key in CONFIGURATION_KEYS},
        timing=timing,
        test_accuracy=document["metrics"].get("test_accuracy"),
        environment={key: environment.get(key) for key in ENVIRONMENT_KEYS},
    )
    return result, note


def load_results(directory: Path) -> tuple[list[RunResult], list[str]]:
    """Every readable ``*.json`` in ``directory`` (not recursive), plus one warning per skipped file."""
    if not directory.is_dir():
        problem = "is not a directory" if directory.exists() else "does not exist"
        raise EnvkitError(f"results directory {directory} {problem} (give the directory the recipes wrote with --results-dir)")
    results: list[RunResult] = []
    warnings: list[str] = []
    for path in sorted(directory.glob("*.json")):
        try:
            result, note = parse(path, path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            warnings.append(f"skipped {path}: {exc}")
            continue
        if note:
            warnings.append(f"{path}: {note}")
        results.append(result)
    return results, warnings

"""Read the results JSON of every run, a command's or a seed recipe's, into validated records.

The contract is one file, envkit/data/results.schema.json: a generic core (the run wrapper's
``run`` block, the program's metrics, the environment) plus a recipe section for the seed
recipes' richer records. This module reads its version, recipes and field names from there
and validates every file against it. A results directory collects files from many runs,
envkit versions and hosts, so reading is forgiving of results objects: one this envkit cannot
use is skipped with one warning naming it, and older layouts are upgraded to the current one
before validation so the report code only ever sees the current schema version. A file that is
no JSON object at all is no envkit's results file, whatever its version: something else writes
into the results directory, and the report refuses it (one line naming it) rather than hide it.
"""

from __future__ import annotations

import hashlib
import math
import re
import statistics
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import jsonschema

from envkit.errors import EnvkitError
from envkit.project import validators
from envkit.project.datafile import DATA_DIR
from envkit.support.bounded_load import Refused, load_json, parse_json, read_text
from envkit.support.provenance_facts import wrapper_state

SCHEMA_PATH = DATA_DIR / "results.schema.json"


@cache
def results_schema() -> dict:
    return load_json(SCHEMA_PATH)


def _properties(block: str) -> dict:
    return results_schema()["properties"][block]["properties"]


SCHEMA_VERSION: int = results_schema()["properties"]["schema_version"]["const"]
KNOWN_RECIPES: tuple[str, ...] = tuple(results_schema()["properties"]["recipe"]["enum"])
CONFIGURATION_KEYS: tuple[str, ...] = tuple(_properties("configuration"))
ENVIRONMENT_KEYS: tuple[str, ...] = tuple(_properties("environment"))
# The timing statistics ({mean, std, n}); steady_epoch_s leaves out the first epoch (compilation on XLA).
STAT_KEYS: tuple[str, ...] = tuple(
    key for key, value in _properties("timing").items() if value.get("$ref") == "#/$defs/stat"
)


class NotAnObject(ValueError):
    """The file holds no JSON object: not any envkit's results file (a program's own output, a cut-off copy).
    ``found``: what it holds instead, in words."""

    def __init__(self, reason: str, found: str):
        super().__init__(reason)
        self.found = found


# The longest text a report shows of one field of a record (an argument, a name, a line of stderr); a longer one is
# cut and says so (``shown``).
FIELD_CHARS = 500
LONG_RUN = re.compile(f'[^"]{{{FIELD_CHARS + 1}}}')
JSON_KINDS = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true or false"}


@dataclass(frozen=True)
class Stat:
    mean: float
    std: float
    n: int


@dataclass(frozen=True)
class RunResult:
    path: Path
    recipe: str | None  # None: a command's run (the generic core only, no recipe section)
    run_name: str
    configuration: dict  # a recipe's: every CONFIGURATION_KEYS entry; a command's: {}
    timing: dict  # a recipe's: total_s, first_epoch_s: float; STAT_KEYS present: Stat; a command's: {}
    test_accuracy: float | None
    environment: dict  # every ENVIRONMENT_KEYS entry, None where unknown
    notebook: dict | None = None  # the optional block envkit's notebooks add: where the run ran, on which packages
    settings: dict = field(default_factory=dict)  # every argument of the run, as the recipe recorded them ({} if not)
    run: dict | None = (
        None  # the run wrapper's block (experiment, argv, exit_status, wall_time_s), if it started the run
    )
    metrics: dict[str, float] = field(default_factory=dict)  # every numeric metric reported, nested keys joined by "."
    # What the report compares a run by, where the record carries it (each optional: older records lack them).
    started_at: str | None = None  # the run block's (UTC, ISO 8601), else the record's own
    # name -> {"step": [...], "value": [...]}: a command's per-step series, a seed recipe's per-epoch lists
    series: dict = field(default_factory=dict)
    device: dict | None = None  # the run block's device (the run wrapper's): what the program really initialised
    target: str | None = None  # the envkit target it ran on, where the record names it
    data: object = None  # the data it read, where the record names it (any JSON value)
    not_finite: tuple[str, ...] = ()  # the metrics it reported as NaN or ±inf (left out of .metrics)
    # a record the wrapper left "running": "running", "killed or lost" or "running or lost" (wrapper_state's); None:
    # the run ended. Such a run is not a success: counted among the failed ones, left out of the numbers
    state: str | None = None

    @property
    def experiment(self) -> str | None:
        return self.run["experiment"] if self.run else None

    @property
    def succeeded(self) -> bool:
        return self.run is None or self.run["exit_status"] == 0

    @property
    def outcome(self) -> str:
        """How the run ended, in words: its exit status, or what became of one whose record says it is running."""
        if self.state is not None:
            wrapper = self.run.get("wrapper") or {}
            return f"{self.state} (its wrapper, pid {wrapper.get('pid')} on {wrapper.get('host')}, left no end)"
        return f"exit status {self.run['exit_status']}" if self.run else "ended"

    @property
    def program_metrics(self) -> tuple[dict[str, float], tuple[str, ...]]:
        """The metrics its program reported (finite ones by name, and the names reported as NaN or ±inf): a command's
        metrics.json. A seed recipe's metrics block holds its recipe's own fields instead (the test accuracy, the final
        loss, the per-epoch lists), which its row carries as columns and curves of their own: none."""
        return (self.metrics, self.not_finite) if self.recipe is None else ({}, ())

    @property
    def requested_name(self) -> str:
        """The run name the run was started with: a repeated run's file adds -2, -3, ... to it, its settings do not."""
        name = self.settings.get("run_name")
        return name if isinstance(name, str) else self.run_name


def _float(value: int | float) -> float:
    """``value`` as a float; inf for an integer past a float's range (JSON's 1 followed by 400 zeros), which
    float() refuses with an OverflowError."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def not_finite_metrics(metrics: dict, prefix: str = "") -> tuple[str, ...]:
    """The names (as flat_metrics joins them) of the metrics reported as NaN or ±inf."""
    names: list[str] = []
    for key, value in metrics.items():
        if isinstance(value, dict):
            names += not_finite_metrics(value, f"{prefix}{key}.")
        elif isinstance(value, int | float) and not isinstance(value, bool) and not math.isfinite(_float(value)):
            names.append(f"{prefix}{key}")
    return tuple(names)


# A seed recipe's older records (before it wrote its series, recipes/harness/records.py's SERIES): the per-epoch
# lists of its metrics, by the series name its newer records give them, read as its series.
RECIPE_SERIES = {"epoch_loss": "loss", "epoch_test_accuracy": "test_accuracy"}


def recipe_series(metrics: dict) -> dict[str, dict]:
    """An older recipe record's per-epoch lists as series ({"step": [1, ...], "value": [...]})."""
    return {
        name: {"step": list(range(1, len(metrics[key]) + 1)), "value": metrics[key]}
        for key, name in RECIPE_SERIES.items()
        if isinstance(metrics.get(key), list) and metrics[key]
    }


def _record_facts(document: dict) -> dict:
    """The optional facts of a record the report groups and labels runs by (RunResult's started_at ... not_finite)."""
    run = document.get("run") if isinstance(document.get("run"), dict) else {}
    notebook = document.get("notebook") if isinstance(document.get("notebook"), dict) else {}
    device = document.get("device", run.get("device"))
    # the first that names one: a run started without ENVKIT_TARGET records run.target null
    target = document.get("target") or run.get("target") or notebook.get("target")
    return {
        "started_at": run.get("started_at") or document.get("started_at"),
        "series": document.get("series") or {},
        "device": device if isinstance(device, dict) else None,
        "target": target if isinstance(target, str) else None,
        "data": document.get("data", run.get("data")),
        "not_finite": not_finite_metrics(document.get("metrics") or {}),
    }


def flat_metrics(metrics: dict, prefix: str = "") -> dict[str, float]:
    """dvclive's nested metrics as "train.loss" keys; only finite numbers (a step count is a number too)."""
    flat = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flat_metrics(value, f"{name}."))
        elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(_float(value)):
            flat[name] = float(value)
    return flat


def stat_of(values: list[float]) -> dict:
    """Population mean/std, the same statistic the recipes record. Finite values past what a float's sum of squares
    holds (a diverged loss of 1e200 beside 0.5) are summed exactly: never inf, never an OverflowError."""
    try:
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    except OverflowError:  # float ** raises where + gives inf
        mean = std = math.inf
    if not math.isfinite(mean + std) and all(math.isfinite(v) for v in values):
        mean, std = statistics.mean(values), statistics.pstdev(values)
    return {"mean": mean, "std": std, "n": len(values)}


def _from_version_0(document: dict) -> dict:
    """Version 0 (before the contract, no ``schema_version``) kept the raw per-iteration /
    per-epoch seconds as lists and had no ``configuration``: its fields were in ``settings``."""
    upgraded = dict(document)
    timing = dict(document.get("timing") or {})
    for key in STAT_KEYS:
        if isinstance(timing.get(key), list) and timing[key]:
            timing[key] = stat_of(timing[key])
    upgraded["timing"] = timing
    if "configuration" not in document:
        settings = document.get("settings") or {}
        upgraded["configuration"] = {key: settings[key] for key in CONFIGURATION_KEYS if key in settings}
    upgraded.setdefault("environment", {})
    return upgraded


@cache
def _nullable_keys(block: str) -> tuple[str, ...]:
    """The keys of a block whose schema accepts null: version 1 could leave them out."""
    return tuple(
        key for key, schema in _properties(block).items() if jsonschema.Draft202012Validator(schema).is_valid(None)
    )


def _from_version_1(document: dict) -> dict:
    """Version 1 ran on one host, knew one TPU backend (torch_xla) and recorded no lock,
    image ID or distributions; it could leave out the keys that may be null."""
    upgraded = dict(document)
    configuration = document.get("configuration")
    if isinstance(configuration, dict):
        if configuration.get("device") != "tpu" and configuration.get("strategy") == "single":
            # Version 1's mnist called every cpu/cuda run "single"; the strategies are TPU ones (cifar wrote null).
            configuration = dict(configuration, strategy=None)
        added = {"nodes": 1, "backend": "torch_xla" if configuration.get("device") == "tpu" else None}
        if "world_size" in configuration:  # else the file is refused for lacking it, not for this
            added["processes_per_node"] = configuration["world_size"]
        upgraded["configuration"] = {**dict.fromkeys(_nullable_keys("configuration")), **added, **configuration}
    environment = document.get("environment")
    if isinstance(environment, dict):
        upgraded["environment"] = {**dict.fromkeys(_nullable_keys("environment")), "distributions": [], **environment}
    return upgraded


def _from_version_2(document: dict) -> dict:
    """Version 2 called the CUDA release torch was built for ``cuda``, which read as a GPU that was used."""
    environment = document.get("environment")
    if not isinstance(environment, dict) or "cuda" not in environment:
        return document
    renamed = {("torch_cuda_build" if key == "cuda" else key): value for key, value in environment.items()}
    return dict(document, environment=renamed)


UPGRADES = {0: _from_version_0, 1: _from_version_1, 2: _from_version_2}  # version -> the step to the next version


def upgrade(document: dict) -> tuple[dict, str | None]:
    """Bring a document to SCHEMA_VERSION; return it and an optional note."""
    version = document.get("schema_version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError(f"schema_version must be an integer, got {version!r}")
    if version > SCHEMA_VERSION:
        note = f"schema_version {version} is newer than this envkit reads ({SCHEMA_VERSION}); using the fields it knows"
        return document, note
    for step in range(version, SCHEMA_VERSION):
        document = UPGRADES[step](document)
    return dict(document, schema_version=SCHEMA_VERSION), None


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(part) for part in error.absolute_path) or "top level"


@cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(results_schema())


# The scalar item schemas a long array may hold (a series' steps and values, the distributions), checked in a
# plain loop: jsonschema descends into every item (100,000 per second), which made 5,000 records take a minute.
# By exact type: a bool is no integer or number to JSON Schema (a float that is whole goes the slow way).
_SCALAR_TYPES = {"integer": {int}, "number": {int, float}, "string": {str}}


def _scalar_items(schema) -> tuple[set, re.Pattern | None] | None:
    """(the Python types, the compiled pattern) an array's item schema allows, if it is only a type (and pattern)."""
    if (
        not isinstance(schema, dict)
        or not set(schema) <= {"type", "pattern"}
        or schema.get("type") not in _SCALAR_TYPES
    ):
        return None
    return _SCALAR_TYPES[schema["type"]], re.compile(schema["pattern"]) if "pattern" in schema else None


def _without_scalar_arrays(document, schema):
    """``document`` with each array of scalar items emptied, once every item passed the plain check; None when an
    item did not (the whole document then goes through jsonschema, for its message)."""
    if isinstance(document, dict) and isinstance(schema, dict):
        properties = schema.get("properties", {})
        others = schema.get("additionalProperties")
        kept = {}
        for key, value in document.items():
            inner = properties.get(key, others if isinstance(others, dict) else None)
            kept[key] = value if inner is None else _without_scalar_arrays(value, inner)
            if kept[key] is None and value is not None:
                return None
        return kept
    if isinstance(document, list) and isinstance(schema, dict) and (scalar := _scalar_items(schema.get("items"))):
        types, pattern = scalar
        if not {type(item) for item in document} <= types or (pattern and not all(map(pattern.search, document))):
            return None
        if schema.get("uniqueItems") and len(set(document)) != len(document):
            return None
        return []
    return document


def schema_error(document: dict) -> str | None:
    """The most relevant way ``document`` breaks the current schema, one line, or None."""
    skeleton = _without_scalar_arrays(document, results_schema())
    # The validator generated ahead of time (scripts/generate_validators.py) decides, a tenth of jsonschema's time
    # per record (5,000 records: issue 42's report figure); jsonschema words the error of a record it rejects.
    if skeleton is not None and validators.valid(SCHEMA_PATH.name, skeleton):
        return None
    error = jsonschema.exceptions.best_match(_validator().iter_errors(document))
    return None if error is None else f"{_where(error)}: {error.message}"


def shown(text: str) -> str:
    """``text`` cut to FIELD_CHARS characters, the cut said with the length and a hash of the whole, so that two
    long values that differ after the cut stay two values (a run's arguments group its runs)."""
    if len(text) <= FIELD_CHARS:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{text[:FIELD_CHARS]}… [cut: {len(text):,} characters, sha256 {digest}]"


def _fields_cut(value):
    """Every string of a parsed record, keys too, as ``shown``: a report shows each field of a run, and a record
    may hold a 15 MB argument, which would be 15 MB of every page, table and warning that names it."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {shown(key): _fields_cut(item) for key, item in value.items()}
    if isinstance(value, list):
        # A series is thousands of numbers: each passes as it is, without a call of its own.
        return [item if type(item) in _NUMBERS else _fields_cut(item) for item in value]
    return value


_NUMBERS = frozenset((int, float))


def parse(path: Path, text: str) -> tuple[RunResult, str | None]:
    """Parse one file's text; raise ValueError with a one-line reason when unusable (NotAnObject when
    it holds no JSON object)."""
    try:
        document = parse_json(text)
    except Refused as exc:
        raise NotAnObject(str(exc), "it is empty" if not text.strip() else str(exc)) from None
    if not isinstance(document, dict):
        raise NotAnObject("not a results object", f"it holds {JSON_KINDS.get(type(document), 'null')}")
    # Cut before the schema check too: its reason for a skipped file quotes the value it refused. A string past
    # FIELD_CHARS is a run of as many characters without a quote in the text: without one there is nothing to cut.
    if LONG_RUN.search(text):
        document = _fields_cut(document)
    document, note = upgrade(document)
    # A newer file is read by the fields this version knows.
    problem = schema_error(dict(document, schema_version=SCHEMA_VERSION))
    if problem is not None:
        raise ValueError(problem)
    if "recipe" not in document:
        return _command_run(path, document), note
    timing = {
        "total_s": float(document["timing"]["total_s"]),
        "first_epoch_s": float(document["timing"]["first_epoch_s"]),
    }
    for key in STAT_KEYS:
        value = document["timing"].get(key)
        # n == 0: the run measured nothing of this kind (e.g. stopped by --max-steps).
        if value is not None and value["n"] > 0:
            timing[key] = Stat(float(value["mean"]), float(value["std"]), int(value["n"]))
    facts = _record_facts(document)
    result = RunResult(
        path=path,
        recipe=document["recipe"],
        run_name=document["run_name"],
        configuration={key: document["configuration"][key] for key in CONFIGURATION_KEYS},
        timing=timing,
        test_accuracy=document["metrics"].get("test_accuracy"),
        environment={
            key: document["environment"].get(key) for key in ENVIRONMENT_KEYS
        },  # optional ones (image_digest) may be absent
        notebook=document.get("notebook"),
        settings=document.get("settings") or {},
        run=document.get("run"),
        metrics=flat_metrics(document["metrics"]),
        **(facts | {"series": facts["series"] or recipe_series(document["metrics"])}),
    )
    return result, note


def _command_run(path: Path, document: dict) -> RunResult:
    """A command's record (the generic core): its run block, its metrics and its environment."""
    return RunResult(
        path=path,
        recipe=None,
        run_name=document["run_name"],
        configuration={},
        timing={},
        test_accuracy=None,
        environment={key: document["environment"].get(key) for key in ENVIRONMENT_KEYS},
        notebook=document.get("notebook"),
        run=document["run"],
        metrics=flat_metrics(document["metrics"] or {}),
        state=wrapper_state(document["run"].get("wrapper")) if document["run"].get("status") == "running" else None,
        **_record_facts(document),
    )


def refusal(path: Path, reason: str) -> str:
    """The one line for a file in a results directory that holds no JSON object."""
    return (
        f"{path} is not a results file ({reason}): a results directory holds only results files, each a JSON object "
        "(the run wrapper's record of a run, or a seed recipe's); move other files out of it "
        "(a program's own metrics go in ENVKIT_METRICS_DIR, its run's folder)"
    )


def load_results(directory: Path) -> tuple[list[RunResult], list[str]]:
    """Every readable ``*.json`` in ``directory`` (not recursive), plus one warning per skipped file.
    A file that holds no JSON object is refused (EnvkitError): see the module's docstring."""
    if not directory.is_dir():
        problem = "is not a directory" if directory.exists() else "does not exist"
        raise EnvkitError(
            f"results directory {directory} {problem} (give the directory the runs wrote their results into; "
            "run.sh and envkit experiment write to ./results unless told otherwise)"
        )
    try:  # iterdir, not glob: glob calls a directory it cannot list empty
        paths = sorted(path for path in directory.iterdir() if path.name.endswith(".json"))
    except OSError as exc:
        raise EnvkitError(f"results directory {directory}: cannot list it: {exc.strerror or exc}") from None
    results: list[RunResult] = []
    warnings: list[str] = []
    for path in paths:
        try:
            result, note = parse(path, read_text(path))
        except NotAnObject as exc:
            raise EnvkitError(refusal(path, exc.found)) from None
        except (OSError, ValueError) as exc:
            warnings.append(f"skipped {path}: {exc}")
            continue
        if note:
            warnings.append(f"{path}: {note}")
        if result.state is not None:  # counted, not hidden (issue 39 §7)
            warnings.append(f"{path}: {result.outcome}: counted among the failed runs, left out of the numbers")
        results.append(result)
    return results, warnings

"""A project's experiments (envkit.yaml's ``experiments``, or the YAML file it names) as frozen records.

Every place that names an experiment (make targets, doctor, compare, demo, launch,
notebooks, the README table, the report's experiment sections) reads this one table, so
adding an experiment is one entry there. envkit itself ships no experiments: this
repository's seed experiments are its own project's (experiments.yaml at its top level).
An experiment runs a ``command`` (an argv list, from the project root) or, the seed
form, a ``recipe`` (recipes/<recipe>.py with envkit's recipe flags).
"""

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from envkit.errors import EnvkitError
from envkit.project import DEFAULT_CONFIG, kinds
from envkit.project.datafile import DATA_DIR, check, load_checked
from envkit.project.files import refuse_secret_values
from envkit.project.metric_patterns import metric_variables
from envkit.support.bounded_load import load_yaml_kept, note

SCHEMA_PATH = DATA_DIR / "experiments.schema.json"
# The make include's own targets (and `build-<target>`): an experiment named like one would
# be shadowed by it, or shadow it, in `make NAME`.
MAKE_TARGETS = ("help", "render", "lock", "doctor", "compare", "demo", "report", "venv", "test", "lint", "clean")
MAKE_TARGET_PREFIXES = ("build-",)
# The seed form's folder: recipe R is recipes/R.py of the project.
RECIPES = "recipes"
# A program that starts with one of these runs under the Python that runs it (a host's, torchrun's).
PYTHONS = ("python", "python3")


class RecipeRun(NamedTuple):
    """One run of an experiment's recipe."""

    label: str | None  # its name in the table (E3: b16, b16-scaled, ...), None for a one-run experiment
    name: str | None  # the results' run name, <experiment>-<label> (None: the recipe names it)
    summary: str
    args: tuple[str, ...]  # what makes it this run: the experiment's args, its own, and --run-name
    defaults: tuple[str, ...] = ()  # the experiment's size, which the user may change

    @property
    def argv(self) -> tuple[str, ...]:
        """Every recipe argument before the user's."""
        return (*self.args, *self.defaults)


class Experiment(NamedTuple):
    """One experiment of the project (envkit.yaml's experiments, or the file they name): a seed recipe or a
    command."""

    name: str
    summary: str
    title: str  # a run on this host in compare and demo: {gpus} and {processes} are filled in
    kind: str
    recipe: str | None  # recipes/<recipe>.py (the seed form), or None for a command
    args: tuple[str, ...]
    gpus: str  # "none" | "first" | "all"
    scale: str  # "single" | "torchrun" | "tpu-pod"
    published: str | None
    image_title: str | None = None  # the demo's run in the image
    defaults: tuple[str, ...] = ()  # recipe arguments the user may change (its size)
    runs: tuple[RecipeRun, ...] = ()  # one, or the table's runs in order (E3: a batch and learning-rate rule each)
    command: tuple[str, ...] | None = None  # an argv run from the project root, or None for a recipe
    env: Mapping[str, str] = MappingProxyType({})  # environment variables it runs with
    target: str | None = None  # the config's target it runs in: the chosen one (on), else its first
    devices: int = 1  # the GPUs or TPU cores its setting needs at least (a notebook accelerator with fewer is refused)
    targets: tuple[str, ...] = ()  # the config's targets it runs on, the default first; () runs on any of its kind
    gpus_rule: str | None = None  # the GPU rule it gives; None: its target kind's default
    # envkit reproduce's tolerance per metric (absolute): how far a reproduction's mean may lie from the original's
    reproduce: Mapping[str, float] = MappingProxyType({})

    def fits(self, target) -> bool:
        """Whether it runs on the config's ``target`` (a Target): one it names, or (naming none) any of its kind."""
        return self.runs_on(target.name, target.kind)

    def runs_on(self, target: str, kind: str) -> bool:
        """Whether it runs on the target named ``target``, of ``kind``."""
        return target in self.targets if self.targets else kind == self.kind

    def on(self, target) -> "Experiment":
        """The experiment as it runs on ``target`` (one it fits): that target's kind, the GPU rule on it, and the
        target's env: under the experiment's own, over what envkit would set (a CPU's thread budget): every run
        (host, image, notebook, launch) gets its variables from here, so ``cpu-1t: {env: {OMP_NUM_THREADS: "1"}}``
        is one thread wherever it runs."""
        env = {**target.env, **self.env}
        return self._replace(kind=target.kind, target=target.name, gpus=_gpus(self.gpus_rule, target.kind), env=env)

    @property
    def program(self) -> tuple[str, ...]:
        """What runs, from the project's root (on a host, in the image, in a notebook): the command, or the
        recipe's file under the Python that runs it. Its runs' arguments follow."""
        return self.command if self.command is not None else ("python", f"{RECIPES}/{self.recipe}.py")

    @property
    def named_runs(self) -> bool:
        """Several runs, each with a run name the results (and the report) know it by."""
        return self.runs[0].name is not None


def _gpus(rule: str | None, kind: str) -> str:
    """The GPU rule on a kind: the given one where the kind has GPUs (default all), else none. A kind has GPUs
    where its nodes ask for them (kinds.yaml's launch accelerator), the one fact launch reads too."""
    return (rule or "all") if kinds.kind(kind).launch.get("accelerator") == "gpus" else "none"


def _runs(name: str, entry: dict) -> tuple[RecipeRun, ...]:
    args, defaults = tuple(entry.get("args", ())), tuple(entry.get("defaults", ()))
    if "runs" not in entry:
        return (RecipeRun(None, None, entry["summary"], args, defaults),)
    # Each run names its results file, which the report finds it by.
    return tuple(
        RecipeRun(
            label, f"{name}-{label}", run["summary"], (*args, *run["args"], "--run-name", f"{name}-{label}"), defaults
        )
        for label, run in entry["runs"].items()
    )


def table_path(config: Path = DEFAULT_CONFIG) -> Path:
    """The file that holds the project's experiments: the config itself, or the file its ``experiments`` names."""
    return _loaded(config)[0]


def excerpt(config: Path, name: str, kind: str | None = None) -> str:
    """A table of the one experiment ``name``, as the project writes it (JSON, which the loader reads as YAML):
    what a notebook carries so that its report knows the experiment's runs, and changes only with them."""
    import json

    _, table, raw = _loaded(config)
    # The kind resolved (``kind``: the one of the target it runs on): the targets it names are not in the excerpt.
    entry = {key: value for key, value in raw[name].items() if key not in ("target", "targets")}
    entry["kind"] = kind or table[name].kind
    return json.dumps({"experiments": {name: entry}}) + "\n"  # in the table's order: runs keep theirs


def load_experiments(config: Path = DEFAULT_CONFIG) -> dict[str, Experiment]:
    """Name -> Experiment of the project whose config is ``config``, in the table's order (empty when it
    has none); a malformed table is one line naming the file and the entry."""
    return _loaded(config)[1]


def _loaded(config: Path) -> tuple[Path, dict[str, Experiment], dict[str, dict]]:
    """The table of ``config``, read again whenever the config (or the file it names) changed."""
    config = Path(config).resolve()
    path = _load(config, _stamp(config))[0]
    return _load(config, _stamp(config)) if path == config else _load(config, _stamp(config), _stamp(path))


def _stamp(path: Path) -> tuple[int, int]:
    note(path)  # read once per process while unchanged: the render memo must see it on every render
    try:
        stat = path.stat()
    except OSError:
        return (0, 0)  # absent: reading it says so in one line
    return (stat.st_mtime_ns, stat.st_size)


@cache
def _load(config: Path, *stamps: tuple[int, int]) -> tuple[Path, dict[str, Experiment], dict[str, dict]]:
    """``stamps``: the modification time and size of the files read, so an edited one is read again."""
    data = load_yaml_kept(config)
    data = data if isinstance(data, dict) else {}
    targets = data.get("targets") if isinstance(data.get("targets"), dict) else {}
    named = data.get("experiments")
    if isinstance(named, str):
        path = _named_file(config, named)
        document = load_checked(path, SCHEMA_PATH)
    else:
        path = config
        document = {"experiments": named or {}}
        check(path, SCHEMA_PATH, document)
    listed = data.get("include_secrets")
    include_secrets = tuple(entry for entry in listed if isinstance(entry, str)) if isinstance(listed, list) else ()
    refuse_secret_values(path, config.parent, {"experiments": document["experiments"]}, include_secrets)
    table, run_names = {}, set()
    for name, entry in document["experiments"].items():
        table[name] = _experiment(path, name, entry, targets)
        for run in table[name].runs if table[name].named_runs else ():
            # e3 + run x-y and e3-x + run y would write the same results file
            if run.name in run_names:
                raise EnvkitError(f"{path}: experiments/{name}: run name {run.name} is another experiment's too")
            run_names.add(run.name)
    return path, table, document["experiments"]


def _named_file(config: Path, named: str) -> Path:
    root = config.parent
    path = (root / named).resolve()
    if Path(named).is_absolute() or not path.is_relative_to(root):
        raise EnvkitError(f"{config}: experiments: {named!r} is outside the project; name a YAML file under {root}")
    if not path.is_file():
        raise EnvkitError(f"{config}: experiments: {named} not found; name a YAML file with an experiments key")
    return path


def _experiment(path: Path, name: str, entry: dict, targets: dict) -> Experiment:
    at = f"{path}: experiments/{name}"
    if name in MAKE_TARGETS or name.startswith(MAKE_TARGET_PREFIXES):
        reserved = ", ".join([*MAKE_TARGETS, *(f"{prefix}*" for prefix in MAKE_TARGET_PREFIXES)])
        raise EnvkitError(f"{at}: the name is a make target of envkit's; rename it (reserved: {reserved})")
    if ("recipe" in entry) == ("command" in entry):
        raise EnvkitError(f"{at}: give either command (an argv list run from the project root) or recipe, not both")
    named = _named_targets(at, entry, targets)
    target_kind = targets[named[0]].get("kind") if named and isinstance(targets[named[0]], dict) else None
    kind = entry.get("kind") or target_kind or _notebook_kind(targets, named)
    if named and "kind" in entry and kind != target_kind:
        raise EnvkitError(f"{at}/kind: {kind!r} is not the kind of target {named[0]} ({target_kind}); drop one")
    if kind is None:
        raise EnvkitError(
            f"{at}: give targets (the config's targets it runs on) or kind (one of {', '.join(kinds.names())})"
        )
    if kind not in kinds.names():
        raise EnvkitError(f"{at}/kind: {kind!r} is not a target kind; choose from {', '.join(kinds.names())}")
    gpus = _gpus(entry.get("gpus"), kind)
    fields = {key: entry[key] for key in ("image_title", "recipe") if key in entry}
    return Experiment(
        name=name,
        summary=entry["summary"],
        title=entry.get("title", entry["summary"]),
        kind=kind,
        args=tuple(entry.get("args", ())),
        gpus=gpus,
        scale=entry.get("scale", "single"),
        published=entry.get("published"),
        defaults=tuple(entry.get("defaults", ())),
        runs=_runs(name, entry),
        command=tuple(entry["command"]) if "command" in entry else None,
        env={**entry.get("env", {}), **metric_variables(at, entry.get("metrics"))},
        target=named[0] if named else None,
        targets=named,
        gpus_rule=entry.get("gpus"),
        devices=entry.get("devices", 1),
        reproduce=dict(entry.get("reproduce", {})),
        recipe=fields.get("recipe"),
        image_title=fields.get("image_title"),
    )


def _named_targets(at: str, entry: dict, targets: dict) -> tuple[str, ...]:
    """The config's targets an entry names (targets, or the older single target), each checked to exist."""
    if "target" in entry and "targets" in entry:
        raise EnvkitError(f"{at}: give targets (a list) or target, not both")
    named = entry["targets"] if "targets" in entry else [entry["target"]] if "target" in entry else []
    for index, name in enumerate(named):
        if name not in targets:
            where = f"{at}/targets/{index}" if "targets" in entry else f"{at}/target"
            raise EnvkitError(f"{where}: {name!r} is not a target of the config; choose from {', '.join(targets)}")
    return tuple(named)


def _notebook_kind(targets: dict, named: tuple[str, ...]) -> str | None:
    """A notebook target names no kind: its accelerator's kind (the config checks the target itself)."""
    if not named or not isinstance(targets[named[0]], dict):
        return None
    from envkit.project.notebook_platforms import load_platforms

    raw = targets[named[0]]
    platform = load_platforms().platforms.get(raw.get("platform"))
    accelerator = platform.accelerators.get(raw.get("accelerator")) if platform is not None else None
    return accelerator.kind if accelerator is not None else None


def experiment(name: str, config: Path = DEFAULT_CONFIG) -> Experiment:
    table = load_experiments(config)
    if name not in table:
        choices = f"choose from {', '.join(table)}" if table else f"{table_path(config)} has no experiments"
        raise EnvkitError(f"unknown experiment {name!r}: {choices}")
    return table[name]


def _options(args: tuple[str, ...] | list[str]) -> list[tuple[str, str | None]]:
    """(--option, value) pairs of an argument list: '--name value', '--name=value', or a flag with None."""
    pairs = []
    for index, word in enumerate(args):
        if not word.startswith("--") or word == "--":
            continue
        name, equals, value = word.partition("=")
        if not equals:
            following = args[index + 1] if index + 1 < len(args) else None
            value = following if following is not None and not following.startswith("--") else None
        pairs.append((name, value))
    return pairs


def check_recipe_args(entry: Experiment, args: tuple[str, ...] | list[str], config: Path = DEFAULT_CONFIG) -> None:
    """Refuse recipe arguments that change what makes ``entry`` this experiment (a value its own args set,
    or one of its runs': E3's batch, learning-rate rule and run name).

    The recipes read the last of a repeated option, so a user's ``--parallel none`` after
    cpu-ddp-cifar's ``--parallel ddp`` would silently run another experiment under this name.
    An option may be abbreviated, as the recipes' argparse allows. Its ``defaults`` (its size) may change.
    """
    for run in entry.runs:
        _check_against(entry, run.args, args, config)


def _check_against(
    entry: Experiment, own_args: tuple[str, ...], args: tuple[str, ...] | list[str], config: Path
) -> None:
    own = dict(_options(own_args))
    for name, value in _options(args):
        meant = [option for option in own if option.startswith(name) and len(name) > 2]
        if len(meant) != 1 or value == own[meant[0]]:
            continue
        option = meant[0]
        wanted = {**own, option: value}
        others = [
            other
            for other in load_experiments(config).values()
            if other.recipe == entry.recipe and dict(_options(other.args)).get(option) == value
        ]
        # The experiment that is what the user asked for: most of the wanted settings, this kind first.
        others.sort(
            key=lambda other: (
                -sum(dict(_options(other.args)).get(k) == v for k, v in wanted.items()),
                other.kind != entry.kind,
            )
        )
        instead = f"; {others[0].name} runs with {' '.join(others[0].args)}" if others else ""
        given = name if value is None else f"{name} {value}"
        raise EnvkitError(
            f"{entry.name} runs with {option} {own[option]} ({table_path(config).name}), "
            f"and the recipe arguments say {given}: drop it{instead}"
        )


def by_kind(kind_order: list[str], config: Path = DEFAULT_CONFIG) -> list[Experiment]:
    """The experiments grouped by kind in ``kind_order`` (cheap kinds first), table order within a kind."""
    table = load_experiments(config).values()
    return [entry for kind in kind_order for entry in table if entry.kind == kind]


def run_of(run_name: str, config: Path = DEFAULT_CONFIG) -> tuple[Experiment, RecipeRun] | None:
    """The experiment and run a results file's requested run name belongs to, if any."""
    for entry in load_experiments(config).values():
        for run in entry.runs:
            if run.name is not None and run.name == run_name:
                return entry, run
    return None

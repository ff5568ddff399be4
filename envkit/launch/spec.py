"""What a launch engine module declares (torchx's runopts, _validate and materialize, in one record).

Each engine module ends with an ``Engine``: the accelerators it can ask a node for (so the target kinds it
runs: the accelerator of kinds.yaml's ``launch``), its options (which are also its command-line flags), its checks
and its plan. envkit.launch.engines lists them; nothing else names an engine.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar

from envkit.errors import EnvkitError
from envkit.project.kinds import load_kinds
from envkit.project.placement import place


@dataclass(frozen=True)
class Option:
    """One engine setting: an attribute of the Job's options by its name, and the flag --<name with '-'>."""

    name: str
    help: str
    default: Any = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    switch: bool = False  # a flag without a value (store_true)
    metavar: str | None = None  # the value's name in --help (default: the name in capitals)
    # What a valid value looks like, checked before the job is rendered (the engine would refuse it only
    # once the job runs): (what to give, the pattern a given value must match).
    valid: tuple[str, re.Pattern] | None = None

    @property
    def flag(self) -> str:
        return f"--{self.name.replace('_', '-')}"

    def check(self, value: Any) -> None:
        if self.valid is not None and value is not None and not self.valid[1].match(value):
            raise EnvkitError(f"{self.flag} {value!r} is not valid: give {self.valid[0]}")


@dataclass(frozen=True)
class Engine:
    name: str  # --on NAME
    accelerators: tuple[str, ...]  # what it can ask a node for: none | gpus | slice (kinds.yaml's launch)
    options: tuple[Option, ...]  # its own flags: no other engine's, nor launch's own (envkit.launch.engines.registry)
    plan: Callable  # (job, output: Path) -> envkit.launch.plan.LaunchPlan
    check: Callable | None = None  # (job) -> None: refuses, with one line, what the engine could not run
    stop: Callable | None = None  # (job) -> argv that stops the running job (--stop)
    # Job names become file names and #SBATCH values (the default rule), or Kubernetes names.
    job_name: tuple[str, re.Pattern] | None = None  # (the one-line error's rule, the pattern)
    reserved_env: tuple[str, ...] = ()  # prefixes of the variables the engine sets itself (not --env's)

    # An engine runs the image of one of the config's image targets, one run of the experiment per job named after
    # it, on the kinds whose accelerator it asks for: what runs something else (Kaggle: a notebook) overrides these.
    runs_image: ClassVar[bool] = True
    one_run: ClassVar[bool] = True  # an experiment of several named runs is refused

    @property
    def kinds(self) -> tuple[str, ...]:
        """The target kinds it runs, in kinds.yaml's order."""
        return tuple(kind.name for kind in load_kinds().values() if kind.launch["accelerator"] in self.accelerators)

    def place(self, config, experiment, name: str | None):
        """(the experiment on its target, the target) for --target ``name`` or None: an image target."""
        return place(config, experiment, name)

    def default_name(self, experiment: str) -> str:
        """The job's name without --name."""
        return experiment

    def settings(self, given: Mapping[str, Any]) -> SimpleNamespace:
        """This engine's options from ``given`` (parsed flags, or a test's few), defaults for the rest, checked."""
        values = {}
        for option in self.options:
            values[option.name] = given.get(option.name, option.default)
            option.check(values[option.name])
        return SimpleNamespace(**values)

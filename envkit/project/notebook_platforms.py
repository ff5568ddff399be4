"""Notebook platforms (envkit/data/notebook_platforms.yaml) as frozen records.

Colab and Kaggle: their accelerators under each platform's own names, the runtime
behind each accelerator (Python, glibc, preinstalled torch / torch_xla / libtpu,
each with its source and date), how a user picks the accelerator, and where a
notebook's results go. Config, lock, the notebook builder and `envkit launch --on
kaggle` ask these records; nothing else names a platform.
"""

from functools import cache
from pathlib import Path
from typing import NamedTuple

from envkit.errors import EnvkitError
from envkit.project.datafile import DATA_DIR, load_table

PLATFORMS_PATH = DATA_DIR / "notebook_platforms.yaml"
# envkit's own table, checked against its schema by tests/project/test_notebook_platforms.py, not at every run
# (issue 42).
SCHEMA_PATH = DATA_DIR / "notebook_platforms.schema.json"


class Fact(NamedTuple):
    value: str
    source: str
    date: str
    verified: bool

    def cite(self) -> str:
        return f"{self.source}, {self.date}" + ("" if self.verified else ", unverified")


class Runtime(NamedTuple):
    name: str  # "tpu" | "gpu": the platform's runtime behind the accelerator
    facts: dict[str, Fact]  # os, python, glibc, and the preinstalled torch, torch_xla, libtpu, uv where known

    @property
    def python(self) -> str:
        return self.facts["python"].value

    @property
    def python_minor(self) -> str:
        return ".".join(self.python.split(".")[:2])

    @property
    def glibc(self) -> str:
        return self.facts["glibc"].value

    def packages(self) -> dict[str, str]:
        """The preinstalled packages envkit records: torch, torch_xla, libtpu where the runtime has them."""
        return {name: self.facts[name].value for name in ("torch", "torch_xla", "libtpu") if name in self.facts}


class Accelerator(NamedTuple):
    name: str  # the platform's own name: v5e-1, T4, TpuV5E8, NvidiaTeslaT4
    label: str  # what the platform's menu shows
    kind: str  # the target kind (kinds.yaml) whose wheels and device flag apply
    device: dict  # {"tpu": chip, "chips": n} or {"gpu": name part, "count": n}
    devices: int  # what an experiment runs on: its GPUs, or its TPU cores (one replica each)
    runtime: str
    tier: str
    note: str | None
    metadata: dict  # notebook metadata the platform reads to preselect it

    @property
    def is_tpu(self) -> bool:
        return "tpu" in self.device

    @property
    def unit(self) -> str:
        return "TPU cores" if self.is_tpu else "GPUs"


class Platform(NamedTuple):
    name: str
    title: str
    select: str  # with {label} and {name}
    runtime_version_env: tuple[str, ...]
    output: dict
    open_url: str | None
    runtimes: dict[str, Runtime]
    accelerators: dict[str, Accelerator]

    def accelerator(self, name: str, where: str = "") -> Accelerator:
        if name not in self.accelerators:
            raise EnvkitError(
                f"{where}unknown accelerator {name!r} for {self.title}; its accelerators: "
                f"{', '.join(self.accelerators)}"
            )
        return self.accelerators[name]

    def runtime_of(self, accelerator: Accelerator) -> Runtime:
        return self.runtimes[accelerator.runtime]

    def how_to_select(self, accelerator: Accelerator) -> str:
        return self.select.format(label=accelerator.label, name=accelerator.name)


class PlatformData(NamedTuple):
    checked: str
    tpu_vendor: str
    tpu_chips: dict[str, dict]  # PCI device id (or device:subsystem) -> {chip, cores}
    tpu_chips_source: str
    cpu_drop: tuple[str, ...]  # CPU mode: accelerator-only options left out, each with its value
    cpu_args: tuple[str, ...]  # CPU mode: what follows the experiment's remaining arguments
    platforms: dict[str, Platform]

    def cpu_mode_args(self, args: tuple[str, ...]) -> list[str]:
        """An experiment's arguments for CPU mode: its accelerator-only options dropped, the CPU ones added."""
        kept, skip = [], False
        for arg in args:
            if skip:
                skip = False
            elif arg in self.cpu_drop:
                skip = True
            else:
                kept.append(arg)
        return kept + list(self.cpu_args)


@cache
def load_platforms(path: Path = PLATFORMS_PATH) -> PlatformData:
    data = load_table(path)
    chips = data["tpu_chips"]
    known_chips = {entry["chip"] for entry in chips["devices"].values()}
    platforms = {}
    for name, entry in data["platforms"].items():
        runtimes = {
            runtime: Runtime(runtime, {key: Fact(**fact) for key, fact in facts.items()})
            for runtime, facts in entry["runtimes"].items()
        }
        accelerators = {}
        for accel, spec in entry["accelerators"].items():
            if spec["runtime"] not in runtimes:
                raise EnvkitError(
                    f"{path}: {name}.{accel}: runtime {spec['runtime']!r} is not one of {', '.join(runtimes)}"
                )
            if "tpu" in spec["device"] and spec["device"]["tpu"] not in known_chips:
                raise EnvkitError(f"{path}: {name}.{accel}: TPU chip {spec['device']['tpu']!r} is not in tpu_chips")
            device = spec["device"]
            cores = next((chip["cores"] for chip in chips["devices"].values() if chip["chip"] == device.get("tpu")), 0)
            accelerators[accel] = Accelerator(
                name=accel,
                label=spec["label"],
                kind=spec["kind"],
                device=dict(device),
                devices=device["chips"] * cores if "tpu" in device else device["count"],
                runtime=spec["runtime"],
                tier=spec["tier"],
                note=spec.get("note"),
                metadata=spec.get("metadata", {}),
            )
        platforms[name] = Platform(
            name=name,
            title=entry["title"],
            select=entry["select"],
            runtime_version_env=tuple(entry["runtime_version_env"]),
            output=entry["output"],
            open_url=entry.get("open_url"),
            runtimes=runtimes,
            accelerators=accelerators,
        )
    cpu = data["cpu_mode"]
    return PlatformData(
        data["checked"],
        chips["vendor"],
        chips["devices"],
        chips["source"],
        tuple(cpu["drop"]),
        tuple(cpu["args"]),
        platforms,
    )


def platform(name: str, where: str = "") -> Platform:
    platforms = load_platforms().platforms
    if name not in platforms:
        raise EnvkitError(f"{where}unknown notebook platform {name!r}; choose from {', '.join(platforms)}")
    return platforms[name]


def names() -> list[str]:
    return list(load_platforms().platforms)


def accelerator_of(target) -> tuple[Platform, Accelerator]:
    """A notebook target's (config.Target with a platform) platform and accelerator."""
    found = platform(target.platform)
    return found, found.accelerator(target.accelerator)


def refuse_too_few_devices(experiment, target: str, platform_name: str, accelerator_name: str, where: str = "") -> None:
    """Notebook target ``target``'s accelerator must have the devices ``experiment`` needs (its ``devices``): on
    fewer it would run another setting under the experiment's name (E2's DDP x4 on one T4, E3's global batches
    on one core). The refusal names the accelerators of every platform that have enough."""
    found = platform(platform_name)
    accelerator = found.accelerator(accelerator_name)
    if accelerator.devices >= experiment.devices:
        return
    fitting = [
        f"{name} {other.name} ({other.devices})"
        for name, platform_ in load_platforms().platforms.items()
        for other in platform_.accelerators.values()
        if other.kind == accelerator.kind and other.devices >= experiment.devices
    ]
    setting = f" ({experiment.published})" if experiment.published else ""
    enough = ", ".join(fitting) or f"none on {' or '.join(names())}: run it with envkit experiment or envkit launch"
    raise EnvkitError(
        f"{where}experiment {experiment.name} needs {experiment.devices} {accelerator.unit}{setting}, and target "
        f"{target}'s {found.name} {accelerator.name} has {accelerator.devices}; accelerators with enough: {enough}"
    )


def where_it_runs(target) -> str:
    """One line for `envkit targets`: 'colab v5e-1 (tpu runtime: Python 3.13.15, glibc 2.35)'."""
    found, accelerator = accelerator_of(target)
    runtime = found.runtime_of(accelerator)
    return f"{found.name} {accelerator.name} ({runtime.name} runtime: Python {runtime.python}, glibc {runtime.glibc})"


def runtime_of(target) -> Runtime:
    """The platform runtime a notebook target runs in: its glibc is the target's lock platform."""
    found, accelerator = accelerator_of(target)
    return found.runtime_of(accelerator)

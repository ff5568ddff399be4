"""One job description for every engine (torchx's AppDef in spirit).

``build_job`` turns an experiment of the project (envkit.yaml's experiments), the config's
target of the same kind and the command-line choices into a frozen ``Job``, and
refuses (one line, exit 2) anything no engine could run: the renderers in this
package only translate a valid Job into each engine's own form.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from envkit.errors import EnvkitError
from envkit.lock.base_digest import split_reference
from envkit.project import DEFAULT_CONFIG
from envkit.project.experiments import PYTHONS, check_recipe_args
from envkit.project.kinds import kind as target_kind
from envkit.support import provenance

# Where the image holds the project (its WORKDIR: every command runs from there) and mounts data and
# results (as run.sh does).
IMAGE_PROJECT = "/workspace/project"
# The run wrapper every command starts through (templates/Dockerfile.j2 copies it there).
IMAGE_WRAPPER = f"/opt/envkit/{provenance.FILE_NAME}"
CONTAINER_DATA = "/workspace/data"
CONTAINER_RESULTS = "/workspace/results"
DEFAULT_RDZV_PORT = 29500

# The target kinds each engine has hardware for.
ENGINE_KINDS = {
    "hosts": ("cpu", "cuda"),
    "slurm": ("cpu", "cuda"),
    "pytorchjob": ("cpu", "cuda"),
    "jobset": ("cpu", "cuda", "tpu-vm"),
    "tpu-pod": ("tpu-vm",),
    "skypilot": ("cpu", "cuda", "tpu-vm"),
}
ENGINES = tuple(ENGINE_KINDS)
# Engines that run an experiment's notebook, not an image (envkit/launch/kaggle.py): no Job, no renderer.
NOTEBOOK_ENGINES = ("kaggle",)
KUBERNETES_ENGINES = ("pytorchjob", "jobset")
# The first is the default: the image, through the daemonless runtime a user may run on a cluster.
SLURM_CONTAINERS = ("podman", "docker", "pyxis", "apptainer", "host")

# A Kubernetes object name that also serves as a DNS label (RFC 1123).
_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# Job names become file names and #SBATCH values: no path separators, spaces or newlines.
_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
_SBATCH_VALUE = {"partition": re.compile(r"^[A-Za-z0-9_.,-]+$"), "time": re.compile(r"^[0-9][0-9:-]*$")}
# --env NAME=VALUE: a name every engine can set (POSIX shell, docker -e, Kubernetes, SkyPilot).
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Engine options checked here because the engine would refuse them only once the job runs:
# a TPU VM and its zone (Google Cloud's resource names), SkyPilot's NAME[:COUNT] accelerators,
# GKE's accelerator and slice topology, a Kubernetes claim name.
_ENGINE_VALUE = {
    "tpu": (
        "a TPU VM name: lowercase letters, digits and '-', starting with a letter",
        re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"),
    ),
    "zone": ("a zone such as us-central2-b", re.compile(r"^[a-z]+(-[a-z]+[0-9]+)+-[a-z]$")),
    "accelerators": (
        "NAME[:COUNT] such as A100:8 or tpu-v5e-16 (COUNT a positive number)",
        re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(:([1-9][0-9]*|[0-9]*\.[0-9]*[1-9][0-9]*))?$"),
    ),
    "tpu_accelerator": ("GKE's accelerator name such as tpu-v5-lite-podslice", _DNS_1123_LABEL),
    "tpu_topology": ("a slice topology such as 4x4 or 2x2x4", re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*){1,2}$")),
    "volume_claim": ("a PersistentVolumeClaim name (DNS-1123 label)", _DNS_1123_LABEL),
}
# Set by envkit or the engine from the job itself; the options that change them are named instead.
RESERVED_ENV = {
    "ENVKIT_IMAGE": "--image",
    "ENVKIT_IMAGE_ID": "--registry (envkit push's record)",
    "IMAGE": "--image",
    "DATA_DIR": "--data-dir",
    "RESULTS_DIR": "--results-dir",
    "ENVKIT_DATA_DIR": "--data-dir",
    "ENVKIT_RESULTS_DIR": "--results-dir",
    "ENVKIT_DEVICE": "the experiment's target kind",
    "ENVKIT_EXPERIMENT": "the experiment",
    "GPUS": "--gpus-per-node",
    "NNODES": "--nodes",
    "NODE_RANK": "--nodes",
    "RDZV_ENDPOINT": "--rdzv-port",
    "RDZV_ID": "--name",
    "PJRT_DEVICE": "the experiment",
}
RESERVED_ENV_PREFIXES = ("PET_", "SLURM_", "SKYPILOT_")


@dataclass(frozen=True)
class EngineOptions:
    """Settings only some engines read; build_job checks the ones the chosen engine needs."""

    container: str = SLURM_CONTAINERS[0]  # slurm: podman | docker | pyxis | apptainer | host
    partition: str | None = None  # slurm
    time: str | None = None  # slurm
    image_tarball: str | None = None  # slurm podman/apptainer, tpu-pod: envkit save's .tar.gz (absolute)
    hosts: tuple[str, ...] = ()  # hosts: the machines, the first one holds the rendezvous
    tpu: str | None = None  # tpu-pod: TPU VM name
    zone: str | None = None  # tpu-pod
    tpu_accelerator: str | None = None  # jobset on TPU: GKE's accelerator name
    tpu_topology: str | None = None  # jobset on TPU: slice topology, e.g. 4x4
    tpu_chips_per_node: int = 4  # jobset on TPU: google.com/tpu per pod
    volume_claim: str = "envkit"  # kubernetes: the PersistentVolumeClaim holding data/ and results/
    accelerators: str | None = None  # skypilot: e.g. A100:8 or tpu-v5e-16


@dataclass(frozen=True)
class Job:
    name: str
    experiment: str
    kind: str  # target kind: cpu | cuda | tpu-vm
    scale: str  # single | torchrun | tpu-pod
    target: str  # config target whose image runs
    image: str  # the reference every node runs: REGISTRY/envkit-<target>@sha256:... once pushed (launch/images.py)
    program: tuple[str, ...]  # what runs from the project's root: Experiment.program
    args: tuple[str, ...]  # the experiment's arguments, then the user's
    recipe: str | None  # the seed form's recipe, which starts torchrun itself where no engine does (hosts)
    nodes: int
    processes_per_node: int  # torchrun's --nproc-per-node (1 unless scale is torchrun)
    gpus_per_node: int
    root: str  # the project directory (absolute): run.sh, and the program's files for a run on the host
    data_dir: str  # host paths for engines that mount them (absolute)
    results_dir: str
    rdzv_port: int = DEFAULT_RDZV_PORT
    rdzv_id: str = "envkit"
    env: tuple[tuple[str, str], ...] = ()  # --env NAME=VALUE, in the order given: set for the recipe on every node
    options: EngineOptions = field(default_factory=EngineOptions)
    image_id: str | None = None  # sha256:<hex> of the image config, when known before the job starts

    @property
    def uses_torchrun(self) -> bool:
        return self.scale == "torchrun"

    def command(self, torchrun: list | None = None) -> list:
        """The program and its arguments, run from the project's root: nothing added, the locations and the
        device come from ``run_env``. ``torchrun`` (torchrun and its options) starts one per process: a Python
        script as torchrun's own script, anything else as its program (--no-python)."""
        if not torchrun:
            return [*self.program, *self.args]
        if self.program[0] in PYTHONS and len(self.program) > 1 and self.program[1].endswith(".py"):
            return [*torchrun, *self.program[1:], *self.args]
        return [*torchrun, "--no-python", *self.program, *self.args]

    def wrapped(self, command: list, wrapper: str = IMAGE_WRAPPER) -> list:
        """``command`` through the run wrapper, which writes the results file."""
        return ["python", wrapper, *command]

    def run_env(self, data_dir: str, results_dir: str) -> tuple[tuple[str, str], ...]:
        """Where the command finds its data and writes its results, its device and its experiment, as run.sh
        passes them."""
        return (
            ("ENVKIT_EXPERIMENT", self.experiment),
            ("ENVKIT_DATA_DIR", data_dir),
            ("ENVKIT_RESULTS_DIR", results_dir),
            ("ENVKIT_DEVICE", target_kind(self.kind).device),
        )

    def container_env(self) -> tuple[tuple[str, str], ...]:
        """What a container of the image is given: the image's provenance and the run's locations in it."""
        return self.image_env() + self.run_env(CONTAINER_DATA, CONTAINER_RESULTS)

    def image_env(self) -> tuple[tuple[str, str], ...]:
        """What the results record as environment.image, .image_id and .image_digest (recipes/harness/records.py).

        A name@sha256: reference carries its manifest digest, as run.sh finds it for the engine it runs."""
        digest = split_reference(self.image)[1]
        return (
            (("ENVKIT_IMAGE", self.image),)
            + ((("ENVKIT_IMAGE_ID", self.image_id),) if self.image_id else ())
            + ((("ENVKIT_IMAGE_DIGEST", digest),) if digest and digest.startswith("sha256:") else ())
        )

    def image_notes(self) -> tuple[str, ...]:
        """For engines whose nodes pull the image: say so when it names no registry."""
        if "/" in self.image:
            return ()
        return (
            f"{self.image} names no registry: every node must already have it; "
            f"push it (envkit push {self.target} --registry R) and pass --registry R",
        )


def parse_env(assignments) -> tuple[tuple[str, str], ...]:
    """``--env NAME=VALUE`` words as (name, value) pairs; any value, since every engine quotes or emits it."""
    pairs: dict[str, str] = {}
    for assignment in assignments:
        name, equals, value = assignment.partition("=")
        if not equals or not _ENV_NAME.match(name):
            raise EnvkitError(
                f"--env {assignment!r} is not NAME=VALUE (NAME: letters, digits and '_', not starting with a digit)"
            )
        if name in pairs:
            raise EnvkitError(f"--env {name} is given twice; give each variable once")
        engine_set = [
            f"the engine's {prefix}* variables" for prefix in RESERVED_ENV_PREFIXES if name.startswith(prefix)
        ]
        source = RESERVED_ENV.get(name) or next(iter(engine_set), None)
        if source:
            raise EnvkitError(f"--env {name}: envkit or the engine sets it for the job (from {source}), not --env")
        if "\0" in value:
            raise EnvkitError(f"--env {name}: a value cannot hold a NUL character")
        pairs[name] = value
    return tuple(pairs.items())


def check_gpus(experiment, gpus_per_node: int) -> None:
    """The experiment's GPU rule decides how many GPUs a node may give it."""
    allowed = {"none": (0, 0), "first": (1, 1), "all": (1, None)}[experiment.gpus]
    low, high = allowed
    if gpus_per_node < low or (high is not None and gpus_per_node > high):
        wanted = {"none": "0 (it runs without GPUs)", "first": "1 (it uses one GPU)", "all": "1 or more"}[
            experiment.gpus
        ]
        raise EnvkitError(f"{experiment.name}: --gpus-per-node {gpus_per_node} is not allowed; give {wanted}")


def engine_options(values: Mapping[str, Any]) -> EngineOptions:
    """The engine settings among parsed arguments, each taken by its field's name."""
    return EngineOptions(**{setting.name: values[setting.name] for setting in fields(EngineOptions)})


def build_job(
    experiment,
    target,
    *,
    engine: str,
    nodes: int,
    root: Path,
    data_dir: Path,
    results_dir: Path,
    image: str,
    image_id: str | None = None,
    gpus_per_node: int | None = None,
    nproc_per_node: int | None = None,
    name: str | None = None,
    extra_args: tuple[str, ...] = (),
    rdzv_port: int = DEFAULT_RDZV_PORT,
    env: tuple[str, ...] = (),
    options: EngineOptions = EngineOptions(),
    config: Path = DEFAULT_CONFIG,
) -> Job:
    if engine not in ENGINE_KINDS:
        raise EnvkitError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    if nodes < 1:
        raise EnvkitError(f"--nodes {nodes} is not allowed; give 1 or more")
    if experiment.named_runs:  # a job is one recipe run
        raise EnvkitError(
            f"{experiment.name} is {len(experiment.runs)} recipe runs, and envkit launch submits one: "
            f"run it with make {experiment.name} or envkit experiment {experiment.name}"
        )
    kinds = ENGINE_KINDS[engine]
    if experiment.kind not in kinds:
        fitting = ", ".join(e for e, k in ENGINE_KINDS.items() if experiment.kind in k)
        raise EnvkitError(
            f"--on {engine} runs {'/'.join(kinds)} experiments, and {experiment.name} is a {experiment.kind} "
            f"experiment; engines for it: {fitting}"
        )
    if experiment.scale == "single" and nodes > 1:
        raise EnvkitError(
            f"{experiment.name} runs on one host only (scale single): use --nodes 1, "
            f"or an experiment that spreads over hosts (scale torchrun or tpu-pod)"
        )
    if gpus_per_node is None:
        gpus_per_node = 0 if experiment.gpus == "none" else 1
    check_gpus(experiment, gpus_per_node)
    check_recipe_args(experiment, extra_args, config)
    processes = _processes_per_node(experiment, gpus_per_node, nproc_per_node)
    name = name or experiment.name
    _check_name(engine, name)
    _check_options(engine, experiment, nodes, options, image)
    return Job(
        name=name,
        experiment=experiment.name,
        kind=experiment.kind,
        scale=experiment.scale,
        target=target.name,
        image=image,
        image_id=image_id,
        program=experiment.program,
        args=(*experiment.runs[0].argv, *extra_args),  # the one run: its args, then its defaults
        recipe=experiment.recipe,
        nodes=nodes,
        processes_per_node=processes,
        gpus_per_node=gpus_per_node,
        root=str(root),
        data_dir=str(data_dir),
        results_dir=str(results_dir),
        rdzv_port=rdzv_port,
        rdzv_id=name,
        env=parse_env(env),
        options=options,
    )


def _processes_per_node(experiment, gpus_per_node: int, nproc_per_node: int | None) -> int:
    if nproc_per_node is None:
        return gpus_per_node if experiment.scale == "torchrun" and gpus_per_node else 1
    if experiment.scale != "torchrun" or experiment.gpus != "none":
        raise EnvkitError(
            f"--nproc-per-node applies to CPU torchrun experiments; {experiment.name} runs "
            + (
                "one process per GPU (set --gpus-per-node)"
                if experiment.scale == "torchrun"
                else "one process per node"
            )
        )
    if nproc_per_node < 1:
        raise EnvkitError(f"--nproc-per-node {nproc_per_node} is not allowed; give 1 or more")
    return nproc_per_node


def _check_name(engine: str, name: str) -> None:
    if engine in KUBERNETES_ENGINES:
        if not _DNS_1123_LABEL.match(name):
            raise EnvkitError(
                f"job name {name!r} is not a valid Kubernetes name (DNS-1123 label): lowercase letters, digits "
                f"and '-', starting and ending with a letter or digit, at most 63 characters; set --name"
            )
    elif not _JOB_NAME.match(name):
        raise EnvkitError(
            f"job name {name!r} is not valid: letters, digits, '.', '_' and '-', starting with a letter or digit"
        )


def _check_options(engine: str, experiment, nodes: int, options: EngineOptions, image: str) -> None:
    for key, (expected, pattern) in _ENGINE_VALUE.items():
        value = getattr(options, key)
        if value is not None and not pattern.match(value):
            raise EnvkitError(f"--{key.replace('_', '-')} {value!r} is not valid: give {expected}")
    if engine == "hosts" and nodes > 1 and len(options.hosts) != nodes:
        raise EnvkitError(
            f"--on hosts with --nodes {nodes} needs --hosts with {nodes} comma-separated host names "
            f"(the first holds the rendezvous), got {len(options.hosts)}"
        )
    for host in options.hosts:
        if not _HOST.match(host):
            raise EnvkitError(f"--hosts: {host!r} is not a host name (letters, digits, '.', '-')")
    if engine == "slurm":
        if options.container not in SLURM_CONTAINERS:
            raise EnvkitError(f"unknown --container {options.container!r}; choose from {', '.join(SLURM_CONTAINERS)}")
        for key, pattern in _SBATCH_VALUE.items():
            value = getattr(options, key)
            if value is not None and not pattern.match(value):
                raise EnvkitError(f"--{key} {value!r} is not a valid Slurm {key}")
        if options.container == "apptainer" and not options.image_tarball:
            raise EnvkitError("--container apptainer runs envkit save's tarball: pass --image-tarball FILE.tar.gz")
        if options.container == "pyxis" and "/" not in image:
            raise EnvkitError(
                f"--container pyxis pulls the image on every node, and {image!r} names no registry: "
                f"pass --registry HOST[:PORT][/PATH] (after envkit push) or --image"
            )
    if engine == "tpu-pod" and not (options.tpu and options.zone):
        missing = " and ".join(
            flag for flag, value in (("--tpu NAME", options.tpu), ("--zone ZONE", options.zone)) if not value
        )
        raise EnvkitError(f"--on tpu-pod needs {missing}: the TPU VM's name and zone (gcloud compute tpus tpu-vm list)")
    if engine == "jobset" and experiment.kind == "tpu-vm" and not (options.tpu_accelerator and options.tpu_topology):
        raise EnvkitError(
            "a TPU JobSet needs --tpu-accelerator (GKE's name, e.g. tpu-v5-lite-podslice) and --tpu-topology (e.g. 4x4)"
        )
    if options.tpu_chips_per_node < 1:
        raise EnvkitError(f"--tpu-chips-per-node {options.tpu_chips_per_node} is not allowed; give 1 or more")
    if engine == "skypilot" and experiment.kind == "tpu-vm" and not options.accelerators:
        raise EnvkitError("--on skypilot for a TPU experiment needs --accelerators, e.g. tpu-v5e-16")

"""One job description for every engine (torchx's AppDef in spirit).

``build_job`` turns an experiment of the project (envkit.yaml's experiments), the config's
target of the same kind and the command-line choices into a frozen ``Job``, and
refuses (one line, exit 2) anything no engine could run: the renderers in this
package only translate a valid Job into each engine's own form.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, SimpleNamespace
from typing import Any

from envkit.errors import EnvkitError
from envkit.launch.spec import Engine
from envkit.lock.base_digest import split_reference
from envkit.project import DEFAULT_CONFIG, RENDERED, secrets
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

# Job names become file names and #SBATCH values: no path separators, spaces or newlines.
JOB_NAME = (
    "valid: letters, digits, '.', '_' and '-', starting with a letter or digit",
    re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"),
)
# --env NAME=VALUE: a name every engine can set (POSIX shell, docker -e, Kubernetes, SkyPilot).
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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
    "ENVKIT_ENV": "the names of the experiment's env: and --env",
    "ENVKIT_TARGET": "--target",
    "GPUS": "--gpus-per-node",
    "NNODES": "--nodes",
    "NODE_RANK": "--nodes",
    "RDZV_ENDPOINT": "--rdzv-port",
    "RDZV_ID": "--name",
    "PJRT_DEVICE": "the experiment",
}


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
    # The experiment's env:, then --env NAME=VALUE in the order given (--env wins): set for the program on every node.
    env: tuple[tuple[str, str], ...] = ()
    # The names --env gave: their values reach the program through a launch file or the environment, never a
    # command line, which the run's record keeps as its argv (and the report and page show).
    given_env: tuple[str, ...] = ()
    # Those of them whose value is a secret by envkit's one check (envkit.project.secrets.in_values: by its form or
    # its name): no engine writes or prints it; each passes it by name from its client's environment
    # (plan.LaunchPlan.environment), or refuses it (refuse_secret_env).
    secret_env: tuple[str, ...] = ()
    options: SimpleNamespace = field(default_factory=SimpleNamespace)  # the engine's settings (its Options)
    image_id: str | None = None  # sha256:<hex> of the image config, when known before the job starts
    config: str = str(DEFAULT_CONFIG)  # the project's envkit.yaml (a notebook engine renders the notebook from it)
    extra_args: tuple[str, ...] = ()  # the user's arguments (after '--'), the end of ``args``
    images: str = RENDERED.as_posix()  # the image targets' folder under ``root`` (envkit.yaml's output.images)

    @property
    def rendered(self) -> str:
        """The target's rendered files (run.sh, the run wrapper) on the host: <root>/<images>/<target>."""
        return f"{self.root}/{self.images}/{self.target}"

    @property
    def devices(self) -> Mapping[str, Any]:
        """How a node is asked for the kind's devices (kinds.yaml's launch: accelerator none | gpus | slice)."""
        return target_kind(self.kind).launch

    @property
    def asks_gpus(self) -> bool:
        """Whether each node is asked for --gpus-per-node of the kind's GPUs."""
        return self.devices["accelerator"] == "gpus" and self.gpus_per_node > 0

    @property
    def kind_run(self):
        """The kind's container settings, as run.sh applies them (kinds.yaml's run)."""
        return target_kind(self.kind).run

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

    def written_env(self) -> tuple[tuple[str, str], ...]:
        """``env`` less the secrets (``secret_env``): what a launch file may hold."""
        return tuple((name, value) for name, value in self.env if name not in self.secret_env)

    def secret_values(self) -> tuple[tuple[str, str], ...]:
        """The (name, value) of each ``secret_env``: for the engine client's environment alone."""
        return tuple((name, value) for name, value in self.env if name in self.secret_env)

    def run_env(self, data_dir: str, results_dir: str) -> tuple[tuple[str, str], ...]:
        """Where the command finds its data and writes its results, its device, its experiment and its target, as
        run.sh passes them."""
        return (
            ("ENVKIT_EXPERIMENT", self.experiment),
            ("ENVKIT_TARGET", self.target),
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


def refuse_secret_env(job: Job, written: str, other: str = "") -> None:
    """One line where an --env value is a secret (``Job.secret_env``) and the engine can pass a value only
    ``written`` (into a file it writes); the way out is an engine that passes it by name, or ``other``."""
    if job.secret_env:
        name = job.secret_env[0]
        why = secrets.in_values({name: dict(job.env)[name]})[1]
        raise EnvkitError(
            f"--env {name} {why}, and this engine passes a value only written into {written}: --on skypilot and "
            f"--on slurm pass it by name from the environment their client runs in, written nowhere{other}"
        )


def parse_env(assignments, reserved_prefixes: tuple[str, ...] = ()) -> tuple[tuple[str, str], ...]:
    """``--env NAME=VALUE`` words as (name, value) pairs; any value, since every engine quotes or emits it.
    ``reserved_prefixes``: the engines' own variables (their Engine.reserved_env)."""
    pairs: dict[str, str] = {}
    for assignment in assignments:
        name, equals, value = assignment.partition("=")
        if not equals or not _ENV_NAME.match(name):
            raise EnvkitError(
                f"--env {assignment!r} is not NAME=VALUE (NAME: letters, digits and '_', not starting with a digit)"
            )
        if name in pairs:
            raise EnvkitError(f"--env {name} is given twice; give each variable once")
        engine_set = [f"the engine's {prefix}* variables" for prefix in reserved_prefixes if name.startswith(prefix)]
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


def build_job(
    experiment,
    target,
    *,
    engine: Engine,
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
    options: Mapping[str, Any] = MappingProxyType({}),
    fitting: tuple[str, ...] = (),
    reserved_env: tuple[str, ...] = (),
    config: Path = DEFAULT_CONFIG,
    images: Path = RENDERED,
) -> Job:
    """The job ``engine`` runs; ``options`` are its settings by name (the parsed flags, or a few: defaults fill in),
    ``fitting`` the engines that run the experiment's kind and ``reserved_env`` the prefixes of the variables
    engines set (envkit.launch.engines.build_job names both)."""
    if nodes < 1:
        raise EnvkitError(f"--nodes {nodes} is not allowed; give 1 or more")
    if experiment.named_runs and engine.one_run:  # a job is one recipe run
        raise EnvkitError(
            f"{experiment.name} is {len(experiment.runs)} recipe runs, and envkit launch submits one: "
            f"run it with make {experiment.name} or envkit experiment {experiment.name}"
        )
    _check_fits(experiment, engine, nodes, fitting)
    if gpus_per_node is None:
        gpus_per_node = _default_gpus(experiment, target, engine)
    check_gpus(experiment, gpus_per_node)
    check_recipe_args(experiment, extra_args, config)
    processes = _processes_per_node(experiment, gpus_per_node, nproc_per_node)
    name = name or engine.default_name(experiment.name)
    rule, pattern = engine.job_name or JOB_NAME
    if not pattern.match(name):
        raise EnvkitError(f"job name {name!r} is not {rule}")
    settings = engine.settings(options)
    given = parse_env(env, reserved_env)
    job = Job(
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
        env=tuple({**experiment.env, **dict(given)}.items()),
        given_env=tuple(name for name, _ in given),
        secret_env=tuple(name for name, value in given if secrets.in_values({name: value})),
        options=settings,
        config=str(config),
        extra_args=tuple(extra_args),
        images=images.as_posix(),
    )
    if engine.check is not None:
        engine.check(job)
    return job


def _check_fits(experiment, engine: Engine, nodes: int, fitting: tuple[str, ...]) -> None:
    """The engine has the experiment's hardware, and the experiment spreads over ``nodes`` hosts."""
    if experiment.kind not in engine.kinds:
        raise EnvkitError(
            f"--on {engine.name} runs {'/'.join(engine.kinds)} experiments, and {experiment.name} is a "
            f"{experiment.kind} experiment; engines for it: {', '.join(fitting)}"
        )
    if experiment.scale == "single" and nodes > 1:
        raise EnvkitError(
            f"{experiment.name} runs on one host only (scale single): use --nodes 1, "
            f"or an experiment that spreads over hosts (scale torchrun or tpu-pod)"
        )


def _default_gpus(experiment, target, engine: Engine) -> int:
    """--gpus-per-node's default: none for a CPU experiment, one for ``gpus: first``, and for ``gpus: all`` the GPUs
    the target names (its gpus: 0,2), else the GPUs the experiment's setting needs (its ``devices``, above 1).
    Where none names a count, an engine that asks nodes for GPUs stops: "all" is every GPU of a node, which it can
    only ask for by number (a Slurm --gres=gpu without one is one GPU), and one GPU in its stead would run another
    setting. An engine that asks for none (Kaggle: the notebook's accelerator decides) keeps ``devices``."""
    if experiment.gpus != "all":
        return 0 if experiment.gpus == "none" else 1
    named = getattr(target, "gpus", None)
    if named and named != "all":
        return len(named.split(","))
    if experiment.devices > 1 or "gpus" not in engine.accelerators:
        return experiment.devices
    raise EnvkitError(
        f"{experiment.name}: gpus: all is every GPU of a node, and --on {engine.name} asks for GPUs by number: give "
        "--gpus-per-node N (make: GPUS_PER_NODE=N), or devices: N in its envkit.yaml entry"
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

"""What `envkit experiment`, `envkit compare` and `envkit demo` run: plans of plain commands.

A plan is data (a list of ``Step``), so ``--dry-run`` prints exactly what a real run would execute and tests
compare that text. An experiment of the project's (envkit.yaml's experiments) is three steps: the host check, the
(cached) build, and the recipe in the image through docker/<target>/run.sh. Which steps compare and demo plan
depends on the host facts of ``envkit.host.doctor`` (docs/design.md §5): with a usable Docker engine the
experiments run in the images (``envkit experiment``, ``run.sh``), otherwise the recipes run on the current Python.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from envkit.errors import EnvkitError
from envkit.host.interpreter import describe_interpreter
from envkit.project import DEFAULT_CONFIG, kinds
from envkit.project.experiments import PYTHONS, Experiment, RecipeRun, load_experiments
from envkit.project.load import load_config
from envkit.project.output import Output
from envkit.runs.torchrun import CPU_DDP_PROCESSES, cpu_threads, started_program
from envkit.support import provenance_records
from envkit.support.shellquote import command_line

# Small enough that the whole demo takes about a minute on two CPU cores, yet long enough
# that every run learns its fake data (MNIST ~93%, CIFAR ~100% test accuracy): a demo
# whose accuracies sit at chance would not show that training works.
DEMO_EPOCHS = 4
# Whole epochs of a smaller fake set, so s/epoch stays meaningful.
DEMO_MNIST_ARGS = ("--fake-train-size", "3840", "--fake-test-size", "1000")
# 64 px rather than E2's 112 px: four times fewer pixels keeps MobileNetV2 on a CPU
# within the demo's budget; `make compare` and the gpu-* targets keep 112.
DEMO_CIFAR_ARGS = (
    "--model",
    "mobilenet_v2",
    "--global-batch",
    "32",
    "--image-size",
    "64",
    "--fake-train-size",
    "512",
    "--fake-test-size",
    "128",
)
DEMO_EXTRA_ARGS = {"mnist": DEMO_MNIST_ARGS, "cifar": DEMO_CIFAR_ARGS}
# Said before compare runs on real data: where it comes from, and the way around the download.
REAL_DATA_NOTE = (
    "--dataset real: each recipe downloads MNIST or CIFAR-10 into its data directory on first use, "
    "which needs the network; DATASET=fake (make) or --dataset fake trains on generated data, no download"
)
# The kind whose image the demo builds and runs: every host has its device.
DEMO_KIND = "cpu"


class Step(NamedTuple):
    title: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = MappingProxyType({})  # added to the caller's environment, shown in this order
    needs_torch: bool = False  # runs a recipe on this Python, which then needs torch
    cwd: str | None = None  # where it runs (a command experiment: the project's root), else where envkit runs

    def shell(self) -> str:
        line = command_line(self.env, self.argv)
        return f"cd {shlex.quote(self.cwd)} && {line}" if self.cwd else line


class RunPlan(NamedTuple):
    """The steps `envkit experiment`, `compare` and `demo` run on this host (what an engine is handed is
    envkit.launch.plan.LaunchPlan)."""

    steps: list[Step]
    notes: tuple[str, ...] | list[str] = ()  # said before running, e.g. why Docker is not used
    fallback: RunPlan | None = None  # run instead when a step marked by ``fallback_after`` fails
    fallback_after: int | None = None  # index of the step whose failure switches to ``fallback``


def _envkit(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "envkit", *args)


def host_step(
    title: str,
    entry: Experiment,
    python: str,
    root: Path,
    args: tuple[str, ...],
    env: dict[str, str],
    device: str | None = None,
) -> Step:
    """One run of ``entry`` on this host with ``python``, from the project's root through the run wrapper, as
    run.sh runs it in an image: a recipe writes its record and the wrapper adds its run block; a run that fails
    before the recipe writes (a rendezvous that times out) still gets its record. A leading python is ``python``.
    ``device``: where it runs on another device than its kind's (a CPU stand-in, envkit.runs.torchrun)."""
    if os.sep in python:
        python = os.path.abspath(python)  # it runs from the project's root, not from where it was named
    # The experiment's env:, under what envkit tells every run, over the thread budget it would set.
    env = {**cpu_threads(entry, device), **entry.env, **env}
    program = started_program(entry, device=device)
    if program[0] in PYTHONS:
        program = (python, *program[1:])
    # It runs elsewhere than envkit: the locations it is told must not be relative.
    located = {name: str(Path(value).resolve()) if name in LOCATIONS else value for name, value in env.items()}
    located["ENVKIT_EXPERIMENT"] = entry.name
    if entry.target is not None:  # the target it runs as: its record's row in the report
        located[provenance_records.TARGET_VARIABLE] = entry.target
    return Step(
        title,
        (python, WRAPPER, *program, *args),
        located,
        needs_torch=entry.recipe is not None,
        cwd=str(root.resolve()),
    )


LOCATIONS = ("ENVKIT_RESULTS_DIR", "ENVKIT_DATA_DIR")
WRAPPER = importlib.util.find_spec("envkit.support.provenance").origin  # found, not imported: 5-30 ms (issue 42)


def run_env(kind: str, results_dir: Path | None = None, data_dir: Path | None = None) -> dict[str, str]:
    """The variables a run on this host is told its device and locations by (as run.sh tells one in an image)."""
    paths = dict(zip(LOCATIONS, (results_dir, data_dir), strict=True))
    return {
        **{name: str(path) for name, path in paths.items() if path is not None},
        "ENVKIT_DEVICE": kinds.kind(kind).device,
    }


def _report_step(results_dir: Path, report_args: tuple[str, ...]) -> Step:
    return Step("report", _envkit("report", str(results_dir), *report_args))


def _size_args(epochs: int | None, dataset: str, max_steps: int | None = None) -> tuple[str, ...]:
    return (
        ("--dataset", dataset)
        + (("--epochs", str(epochs)) if epochs is not None else ())
        + (("--max-steps", str(max_steps)) if max_steps is not None else ())
    )


def _runs_here(facts, kind: str) -> bool:
    """Whether the recipes can use ``kind``'s device on this Python (no image, no engine)."""
    check = kinds.kind(kind).host
    if check.check == "nvidia":
        return bool(facts.gpus)
    if check.check == "devices":
        return bool(facts.devices.get(check.name)) and (
            check.module is None or importlib.util.find_spec(check.module) is not None
        )
    return True


def _baseline_first(entries: list[Experiment]) -> list[Experiment]:
    # Within a kind the one-device runs come before the runs that spread out, as a reader compares them;
    # experiments of several runs (E3) come after those comparisons.
    return sorted(
        entries, key=lambda entry: (kinds.names().index(entry.kind), entry.named_runs, entry.scale != "single")
    )


def _processes(entry: Experiment) -> tuple[str, ...]:
    """torchrun over processes rather than GPUs: as many as the plans' small machines have."""
    return ("--nproc", str(CPU_DDP_PROCESSES)) if entry.scale == "torchrun" and entry.gpus == "none" else ()


def _recipe_size(entry: Experiment, size: tuple[str, ...]) -> tuple[str, ...]:
    """The recipes' quiet, size and process flags for ``entry``; none for a command, which has its own."""
    return (*_processes(entry), "--quiet", *size) if entry.recipe is not None else ()


def _title(title: str, gpus: int, run: RecipeRun) -> str:
    title = title.format(gpus=gpus, processes=CPU_DDP_PROCESSES)
    return title if run.name is None else f"{title}: {run.name}"


def local_runs(
    config: Path, results_dir: Path, facts, size: tuple[str, ...], extra: dict[str, tuple[str, ...]] | None = None
) -> list[Step]:
    """The experiments that can run on this Python, without images; ``extra`` args by recipe. The size
    arguments are the recipes' flags: a command gets only its own arguments. A command experiment whose packages
    this Python lacks is left out (lacking_notes says so): it would fail, or run on what is not its environment."""
    runnable = [
        entry
        for entry in load_experiments(config).values()
        if _runs_here(facts, entry.kind) and not _lacking(config, entry)
    ]
    return [
        host_step(
            _title(entry.title, len(facts.gpus), run),
            entry,
            sys.executable,
            config.parent,
            (*run.argv, *_recipe_size(entry, size), *(extra or {}).get(entry.recipe, ())),
            run_env(entry.kind, results_dir),
        )
        for entry in _baseline_first(runnable)
        for run in entry.runs
    ]


def _lacking(config: Path, entry: Experiment) -> list[str]:
    """The distributions a command experiment's default target installs that this Python lacks (a recipe's: none,
    its torch is checked before it runs)."""
    if entry.recipe is not None:
        return []
    from importlib import metadata

    from envkit.project.load import load_config
    from envkit.project.placement import place
    from envkit.project.requirement import requirement_name

    try:
        target = place(load_config(config), entry, None)[1]
    except EnvkitError:
        return []  # no image target: nothing of it runs on a host either (its own commands say why)
    missing = []
    for name in dict.fromkeys(requirement_name(line) for line in target.requirements()):
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def lacking_notes(config: Path) -> list[str]:
    """One note per command experiment left out of a run on this Python for the packages it lacks."""
    notes = []
    for entry in load_experiments(config).values():
        missing = _lacking(config, entry)
        if missing:
            notes.append(
                f"not run here: {entry.name} needs {', '.join(missing)}, which {sys.executable} lacks; run it with its "
                f"target's venv: envkit venv {entry.target}, then envkit experiment {entry.name} --python "
                f".venv-{entry.target}/bin/python"
            )
    return notes


def experiment_gpus(entry: Experiment, requested: str | None, target_gpus: str | None) -> str | None:
    """GPUS for the run, by the experiment's GPU rule: none, every requested one, or the first of them."""
    if entry.gpus == "none":
        return None
    if entry.gpus == "all":
        return requested
    chosen = requested or target_gpus or "all"
    return "0" if chosen == "all" else chosen.split(",")[0]


def experiment_plan(
    entry: Experiment,
    target,
    *,
    config: Path,
    output: Output,
    gpus: str | None,
    results_dir: Path | None = None,
    data_dir: Path | None = None,
    build_args: tuple[str, ...] = (),
    recipe_args: tuple[str, ...] = (),
) -> RunPlan:
    """Check the host, build the target's image (cached), run the recipe in it once per run of the
    experiment: each step needs the one before."""
    gpus = experiment_gpus(entry, gpus, target.gpus)
    gpu_args = ("--gpus", gpus) if gpus is not None else ()
    run_env = {
        name: str(path) for name, path in (("RESULTS_DIR", results_dir), ("DATA_DIR", data_dir)) if path is not None
    }
    run_env.update({"GPUS": gpus} if gpus is not None else {})
    run_env["ENVKIT_EXPERIMENT"] = entry.name  # run.sh passes it to the run wrapper, whose record names it
    # The experiment's env: over the thread budget a command gets on a CPU (as on a host, host_step), each passed
    # into the container by run.sh: otherwise one process takes every core and torchrun gives each of its own one.
    passed = {**cpu_threads(entry), **entry.env}
    if passed:
        run_env.update(passed)
        run_env["ENVKIT_ENV"] = " ".join(passed)
    run_sh = str(output.image_folder(config.parent, target.name) / "run.sh")
    return RunPlan(
        [
            Step(f"can this host run {entry.kind} images?", _envkit("doctor", "--require", entry.kind, *gpu_args)),
            Step(
                f"build the {target.name} image (cached)",
                _envkit("build", target.name, *_config_args(config), *build_args),
            ),
            *(
                Step(_run_title(entry, run), (run_sh, *started_program(entry), *run.argv, *recipe_args), run_env)
                for run in entry.runs
            ),
        ]
    )


def _run_title(entry: Experiment, run: RecipeRun) -> str:
    return f"experiment {entry.name}" + (f", run {run.name}: {run.summary}" if run.name else "")


def local_experiment_plan(
    entry: Experiment,
    python: str,
    *,
    root: Path,
    results_dir: Path | None = None,
    data_dir: Path | None = None,
    recipe_args: tuple[str, ...] = (),
    cpu_stand_in: bool = False,
) -> RunPlan:
    """The experiment's runs with ``python`` on this host instead of in its image: no host check, no build.
    E3 runs so on XLA:CPU (the torch_xla environment with PJRT_DEVICE=CPU CPU_NUM_DEVICES=8). A ``cpu_stand_in``
    (--allow-cpu on a host without the kind's device) starts its processes as a CPU run does, told the device it
    has (the cpu); its record's label stays the target's device."""
    device = "cpu" if cpu_stand_in else None
    env = run_env(device or entry.kind, results_dir, data_dir)
    env |= {provenance_records.TARGET_DEVICE_VARIABLE: kinds.kind(entry.kind).device} if cpu_stand_in else {}
    return RunPlan(
        [
            host_step(_run_title(entry, run), entry, python, root, (*run.argv, *recipe_args), env, device)
            for run in entry.runs
        ]
    )


def _config_args(config: Path) -> tuple[str, ...]:
    return () if config == DEFAULT_CONFIG else ("--config", str(config))


def _docker_usable(facts) -> bool:
    return facts.docker_version is not None and not facts.docker_error


def compare_plan(
    results_dir: Path,
    *,
    epochs: int | None,
    dataset: str,
    max_steps: int | None,
    config: Path,
    facts,
    runnable: list[str],
    report_args: tuple[str, ...] = (),
) -> RunPlan:
    """Every experiment this host can run: ``make`` targets when images can run, else the recipes here."""
    report = _report_step(results_dir, report_args)
    local = local_runs(config, results_dir, facts, _size_args(epochs, dataset, max_steps)) + [report]
    recipes = any(entry.recipe is not None for entry in load_experiments(config).values())
    data = [REAL_DATA_NOTE] if dataset == "real" and recipes else []
    if not runnable:
        reason = facts.docker_error or "no experiment image can run here"
        return RunPlan(
            local,
            [
                f"no Docker experiments on this host ({reason}); running the recipes with {describe_interpreter()}",
                *lacking_notes(config),
                *data,
            ],
        )
    # make runs in the project root: the results directory must not depend on where that is.
    # Each runs where `envkit experiment` puts its files: results must not depend on that.
    where = (*_config_args(config), "--results-dir", str(results_dir.resolve()))
    size = _size_args(epochs, dataset, max_steps)
    table = load_experiments(config)
    steps = [
        Step(f"experiment {name}", _envkit("experiment", *where, name, *(("--", *size) if table[name].recipe else ())))
        for name in runnable
    ]
    # The first target also builds its image: when that fails the host cannot build
    # images at all (no reachable base image, say), so the recipes run here instead.
    fallback = RunPlan(
        local,
        [
            f"the first Docker experiment failed; running the recipes with {describe_interpreter()} instead",
            *lacking_notes(config),
            *data,
        ],
    )
    return RunPlan(steps + [report], data, fallback, 0)


def demo_plan(results_dir: Path, *, config: Path, facts, use_docker: bool, base_image: str | None = None) -> RunPlan:
    """Render every target, run the small comparison this machine can run, report and plot."""
    root = config.parent
    render = Step("render every target", _envkit("render", "--all", "--config", str(config)))
    size = _size_args(DEMO_EPOCHS, "fake")
    report = _report_step(
        results_dir, ("--plot", str(results_dir / "comparison.png"), "--html", str(results_dir / "comparison.html"))
    )
    local = [render] + local_runs(config, results_dir, facts, size, DEMO_EXTRA_ARGS) + [report]
    if not use_docker:
        return RunPlan(local, [f"--no-docker: running the recipes with {describe_interpreter()}"])
    if not _docker_usable(facts):
        return RunPlan(
            local,
            [
                f"Docker is not usable ({facts.docker_error or 'no engine'}); running the recipes with "
                f"{describe_interpreter()}"
            ],
        )
    run_sh = str(load_config(config).output.image_folder(root, DEMO_KIND) / "run.sh")
    mount = {"RESULTS_DIR": str(results_dir)}  # run.sh mounts it at /workspace/results
    in_demo_image = _baseline_first([entry for entry in load_experiments(config).values() if entry.kind == DEMO_KIND])
    docker_steps = [
        render,
        Step(
            f"build the {DEMO_KIND} image",
            _envkit("build", DEMO_KIND, "--config", str(config), *(("--base-image", base_image) if base_image else ())),
        ),
        *(
            Step(
                _title(entry.image_title or entry.title, 0, run),
                (
                    run_sh,
                    *started_program(entry),
                    *run.argv,
                    *_recipe_size(entry, size),
                    *DEMO_EXTRA_ARGS.get(entry.recipe, ()),
                ),
                mount,
            )
            for entry in in_demo_image
            for run in entry.runs
        ),
        report,
    ]
    fallback = RunPlan(
        local[1:], [f"the cpu image could not be built; running the recipes with {describe_interpreter()} instead"]
    )
    return RunPlan(docker_steps, [f"Docker {facts.docker_version} is usable: running in the cpu image"], fallback, 1)


def format_plan(plan: RunPlan) -> str:
    lines = [f"# {note}" for note in plan.notes]
    for number, step in enumerate(plan.steps, start=1):
        lines += [f"# {number}. {step.title}", step.shell()]
        if plan.fallback is not None and number - 1 == plan.fallback_after:
            lines.append("#    if this fails:")
            lines += [f"#    {step_line}" for step_line in format_plan(plan.fallback).splitlines()]
    return "\n".join(lines) + "\n"

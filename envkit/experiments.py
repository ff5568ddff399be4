"""What `envkit compare` and `envkit demo` run: a plan of plain commands.

A plan is data (a list of ``Step``), so ``--dry-run`` prints exactly what a real
run would execute and tests compare that text. Which steps a plan holds depends
on the host facts of ``envkit.doctor`` (docs/design.md §6): with a usable Docker
engine the experiments run in the images (``make`` targets, ``run.sh``),
otherwise the recipes run on the current Python.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from envkit.errors import EnvkitError

# Small enough that the whole demo takes about a minute on two CPU cores, yet long enough
# that every run learns its fake data (MNIST ~93%, CIFAR ~100% test accuracy): a demo
# whose accuracies sit at chance would not show that training works.
DEMO_EPOCHS = 4
# Whole epochs of a smaller fake set, so s/epoch stays meaningful.
DEMO_MNIST_ARGS = ("--fake-train-size", "3840", "--fake-test-size", "1000")
# 64 px rather than E2's 112 px: four times fewer pixels keeps MobileNetV2 on a CPU
# within the demo's budget; `make compare` and the gpu-* targets keep 112.
DEMO_CIFAR_ARGS = ("--model", "mobilenet_v2", "--global-batch", "32", "--image-size", "64",
                   "--fake-train-size", "512", "--fake-test-size", "128")
# Two gloo processes: the smallest DDP that shows the lesson, and all a 2-core laptop has.
CPU_DDP_PROCESSES = 2


@dataclass(frozen=True)
class Step:
    title: str
    argv: tuple[str, ...]
    env: dict = field(default_factory=dict)  # added to the caller's environment
    needs_torch: bool = False  # runs a recipe on this Python, which then needs torch

    def shell(self) -> str:
        assignments = [f"{key}={shlex.quote(value)}" for key, value in sorted(self.env.items())]
        return " ".join(assignments + [shlex.join(self.argv)])


@dataclass
class Plan:
    steps: list[Step]
    notes: list[str] = field(default_factory=list)  # said before running, e.g. why Docker is not used
    fallback: Plan | None = None  # run instead when a step marked by ``fallback_after`` fails
    fallback_after: int | None = None  # index of the step whose failure switches to ``fallback``


def _envkit(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "envkit", *args)


def _recipe(title: str, root: Path, recipe: str, *args: str) -> Step:
    return Step(title, (sys.executable, str(root / "recipes" / f"{recipe}.py"), *args), needs_torch=True)


def _report_step(results_dir: Path, report_args: tuple[str, ...]) -> Step:
    return Step("report", _envkit("report", str(results_dir), *report_args))


def _size_args(epochs: int | None, dataset: str, max_steps: int | None = None) -> tuple[str, ...]:
    return (("--dataset", dataset) + (("--epochs", str(epochs)) if epochs is not None else ())
            + (("--max-steps", str(max_steps)) if max_steps is not None else ()))


def local_runs(root: Path, results_dir: Path, facts, size: tuple[str, ...], extra_mnist: tuple[str, ...] = (),
               extra_cifar: tuple[str, ...] = ()) -> list[Step]:
    """The experiments the recipes can run on this Python, without images."""
    common = ("--results-dir", str(results_dir), "--quiet") + size
    steps = [
        _recipe("mnist on eager CPU", root, "mnist", "--device", "cpu", *common, *extra_mnist),
        _recipe("cifar, one CPU process", root, "cifar", "--device", "cpu", "--parallel", "none", *common, *extra_cifar),
        _recipe(f"cifar, DDP over {CPU_DDP_PROCESSES} gloo processes", root, "cifar", "--device", "cpu",
                "--parallel", "ddp", "--nproc", str(CPU_DDP_PROCESSES), *common, *extra_cifar),
    ]
    if facts.gpus:
        gpus = str(len(facts.gpus))
        steps += [
            _recipe("mnist on one GPU", root, "mnist", "--device", "cuda", *common, *extra_mnist),
            _recipe("cifar, one GPU", root, "cifar", "--device", "cuda", "--parallel", "none", *common, *extra_cifar),
            _recipe(f"cifar, DataParallel over {gpus} GPUs", root, "cifar", "--device", "cuda", "--parallel", "dp",
                    *common, *extra_cifar),
            _recipe(f"cifar, DDP over {gpus} GPUs", root, "cifar", "--device", "cuda", "--parallel", "ddp",
                    *common, *extra_cifar),
        ]
    if facts.tpu_devices and importlib.util.find_spec("torch_xla") is not None:
        steps += [
            _recipe("mnist on one TPU core", root, "mnist", "--device", "tpu", "--cores", "1", *common, *extra_mnist),
            _recipe("mnist on all TPU cores", root, "mnist", "--device", "tpu", "--cores", "all", *common, *extra_mnist),
        ]
    return steps


def _docker_usable(facts) -> bool:
    return facts.docker_version is not None and not facts.docker_error


def _check_local_python() -> None:
    if importlib.util.find_spec("torch") is None:
        raise EnvkitError(f"torch is not installed in {sys.executable}: run 'make venv' (or use a host with Docker) to run the experiments")


def compare_plan(results_dir: Path, *, epochs: int | None, dataset: str, max_steps: int | None, config: Path,
                 facts, runnable: list[str], report_args: tuple[str, ...] = ()) -> Plan:
    """Every experiment this host can run: ``make`` targets when images can run, else the recipes here."""
    root = config.parent
    report = _report_step(results_dir, report_args)
    local = local_runs(root, results_dir, facts, _size_args(epochs, dataset, max_steps)) + [report]
    if not runnable:
        reason = facts.docker_error or "no experiment image can run here"
        return Plan(local, [f"no Docker experiments on this host ({reason}); running the recipes with {sys.executable}"])
    # make runs in the project root: the results directory must not depend on where that is.
    variables = [f"DATASET={dataset}", f"RESULTS_DIR={results_dir.resolve()}"]
    variables += [f"EPOCHS={epochs}"] if epochs is not None else []
    variables += [f"MAX_STEPS={max_steps}"] if max_steps is not None else []
    steps = [Step(f"experiment {name}", ("make", "-C", str(root), name, *variables)) for name in runnable]
    # The first target also builds its image: when that fails the host cannot build
    # images at all (no reachable base image, say), so the recipes run here instead.
    fallback = Plan(local, [f"the first Docker experiment failed; running the recipes with {sys.executable} instead"])
    return Plan(steps + [report], [], fallback, 0)


def demo_plan(results_dir: Path, *, config: Path, facts, use_docker: bool, base_image: str | None = None) -> Plan:
    """Render every target, run the small comparison this machine can run, report and plot."""
    root = config.parent
    render = Step("render every target", _envkit("render", "--all", "--config", str(config)))
    size = _size_args(DEMO_EPOCHS, "fake")
    report = _report_step(results_dir, ("--plot", str(results_dir / "comparison.png")))
    local = [render] + local_runs(root, results_dir, facts, size, DEMO_MNIST_ARGS, DEMO_CIFAR_ARGS) + [report]
    if not use_docker:
        return Plan(local, [f"--no-docker: running the recipes with {sys.executable}"])
    if not _docker_usable(facts):
        return Plan(local, [f"Docker is not usable ({facts.docker_error or 'no engine'}); running the recipes with {sys.executable}"])
    run_sh = str(root / "docker" / "cpu" / "run.sh")
    mount = {"RESULTS_DIR": str(results_dir)}  # run.sh mounts it at /workspace/results
    in_image = ("--quiet",) + size
    docker_steps = [
        render,
        Step("build the cpu image", _envkit("build", "cpu", "--config", str(config),
                                             *(("--base-image", base_image) if base_image else ()))),
        Step("mnist in the cpu image", (run_sh, "mnist", "--device", "cpu", *in_image, *DEMO_MNIST_ARGS), mount),
        Step("cifar, one process in the cpu image",
             (run_sh, "cifar", "--device", "cpu", "--parallel", "none", *in_image, *DEMO_CIFAR_ARGS), mount),
        Step(f"cifar, DDP over {CPU_DDP_PROCESSES} gloo processes in the cpu image",
             (run_sh, "cifar", "--device", "cpu", "--parallel", "ddp", "--nproc", str(CPU_DDP_PROCESSES),
              *in_image, *DEMO_CIFAR_ARGS), mount),
        report,
    ]
    fallback = Plan(local[1:], [f"the cpu image could not be built; running the recipes with {sys.executable} instead"])
    return Plan(docker_steps, [f"Docker {facts.docker_version} is usable: running in the cpu image"], fallback, 1)


def format_plan(plan: Plan) -> str:
    lines = [f"# {note}" for note in plan.notes]
    for number, step in enumerate(plan.steps, start=1):
        lines += [f"# {number}. {step.title}", step.shell()]
        if plan.fallback is not None and number - 1 == plan.fallback_after:
            lines.append("#    if this fails:")
            lines += [f"#    {step_line}" for step_line in format_plan(plan.fallback).splitlines()]
    return "\n".join(lines) + "\n"


def execute(plan: Plan, *, dry_run: bool) -> bool:
    """Run every step (a failed experiment does not stop the others); True when all succeeded."""
    if dry_run:
        sys.stdout.write(format_plan(plan))
        return True
    for note in plan.notes:
        print(f"envkit: {note}", file=sys.stderr)
    if any(step.needs_torch for step in plan.steps):
        _check_local_python()
    failed = []
    for index, step in enumerate(plan.steps):
        print(f"envkit: {step.title}: {step.shell()}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            returncode = subprocess.run(step.argv, env={**os.environ, **step.env}, check=False).returncode
        except OSError as exc:  # e.g. no `make` on this host
            print(f"envkit: cannot start {step.argv[0]}: {exc.strerror or exc}", file=sys.stderr)
            returncode = 127
        print(f"envkit: {step.title}: exit {returncode} after {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
        if returncode == 0:
            continue
        if plan.fallback is not None and index == plan.fallback_after:
            return execute(plan.fallback, dry_run=False)
        failed.append(f"{step.title} (exit {returncode})")
    for failure in failed:
        print(f"envkit: failed: {failure}", file=sys.stderr)
    return not failed

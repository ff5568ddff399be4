"""Running a plan's steps (envkit.runs.plans): each with its environment, said and timed, in order or all of them;
the last one of a run here handed over to the run wrapper, in this process's place."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time

from envkit.errors import EnvkitError
from envkit.runs.plans import WRAPPER, RunPlan, Step, format_plan
from envkit.support import provenance_records


def execute(plan: RunPlan, *, dry_run: bool) -> bool:
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
        returncode = run_step(step)
        if returncode == 0:
            continue
        if plan.fallback is not None and index == plan.fallback_after:
            return execute(plan.fallback, dry_run=False)
        failed.append(f"{step.title} (exit {returncode})")
    for failure in failed:
        print(f"envkit: failed: {failure}", file=sys.stderr)
    return not failed


def run_in_order(plan: RunPlan, *, hand_over: bool = False) -> int:
    """Run the steps until one fails (each needs the one before); its exit status, else 0. ``hand_over``: the last
    step, a run wrapper's (host_step), runs in this process's place, as envkit has nothing left to do after it."""
    for number, step in enumerate(plan.steps, start=1):
        returncode = run_step(step, hand_over=hand_over and number == len(plan.steps))
        if returncode != 0:
            return returncode
    return 0


def run_step(step: Step, *, hand_over: bool = False) -> int:
    """Run one step with its environment, saying what and how long; its exit status. ``hand_over``: it replaces this
    process (os.execvpe: no wait, no teardown), its run wrapper says how it ended; returns only if it cannot start.
    A run wrapper handed over to envkit's own interpreter runs here instead, as the exec would have run it."""
    print(f"envkit: {step.title}: {step.shell()}", file=sys.stderr, flush=True)
    started, env = time.perf_counter(), {**os.environ, **step.env}
    try:
        if hand_over:
            sys.stdout.flush()
            os.chdir(step.cwd or os.curdir)
            if not _wraps_in_this_interpreter(step.argv):
                os.execvpe(step.argv[0], step.argv, {**env, provenance_records.TITLE_VARIABLE: step.title})
            returncode = None
        else:
            returncode = subprocess.run(step.argv, env=env, cwd=step.cwd, check=False).returncode
    except OSError as exc:  # e.g. no run.sh where the config says
        print(f"envkit: cannot start {step.argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        returncode = 127
    if returncode is None:  # here, past the try: the wrapper's own errors are not a start's
        returncode = _wrap_here(step.argv[2:], step.env)
    print(provenance_records.ended(step.title, returncode, time.perf_counter() - started), file=sys.stderr, flush=True)
    return returncode


def _wraps_in_this_interpreter(argv: tuple[str, ...]) -> bool:
    """Whether ``argv`` is envkit's run wrapper started with the interpreter that runs envkit: handed over, it runs
    in this process (no second interpreter's start and imports, about 30 ms of each run: issue 42), the same
    process an exec would have made of it (its pid, its signals, the command dying with it)."""
    return len(argv) > 2 and argv[1] == WRAPPER and bool(sys.executable) and argv[0] == os.path.abspath(sys.executable)


def _wrap_here(argv: tuple[str, ...], env: dict[str, str]) -> int:
    """The run wrapper's main in this process, given the environment it would have been started with."""
    from envkit.support import provenance

    os.environ.update(env)  # what it reads and what the command inherits, as an exec's environment
    return provenance.main(list(argv))


def _check_local_python() -> None:
    if importlib.util.find_spec("torch") is None:
        raise EnvkitError(
            f"torch is not installed in {sys.executable}: run 'make venv' (or use a host with Docker) to run "
            "the experiments"
        )

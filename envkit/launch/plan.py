"""What a launch submits: files, then the engine client's commands (torchx's dry-run info).

``describe`` prints a plan exactly as ``submit`` would carry it out, so that
--dry-run shows what is sent and nothing else; ``submit`` writes the files
atomically and runs the commands through the engines' own clients.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.launch.shell import line
from envkit.project import marks
from envkit.project.output import refuse_outside
from envkit.support.atomic import write_text_atomic

# The first line of each file envkit launch writes that holds a comment (an sbatch script, a manifest, a task): a
# file there without it is the user's, never overwritten. A notebook carries its own mark.
MARK = marks.LAUNCH.decode()
_OURS = (marks.LAUNCH, marks.NOTEBOOK)


@dataclass(frozen=True)
class Step:
    """A step of a submission that is not one client call (waiting for a notebook to finish): ``shown`` is its line
    in the dry run (a command, or a '# ' note), ``run`` does it."""

    shown: str
    run: Callable[[], object]


@dataclass(frozen=True)
class LaunchPlan:
    files: tuple[tuple[str, str], ...]  # (path, text), written before any command runs
    commands: tuple[tuple[str, ...] | Step, ...]  # argv (or a Step), run in order on this machine
    results: str  # where the results will land
    notes: tuple[str, ...] = ()  # what the user does next (stop the run, fetch the results)
    elsewhere: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (where, argv): commands for the user to run there
    executable: tuple[str, ...] = ()  # paths among files that get mode 755
    brief: tuple[tuple[str, str], ...] = ()  # (path, what it is): files the dry run names instead of printing
    before: Callable[[], object] | None = None  # checked before anything is written (the client, its login)
    private: bool = False  # the files hold --env values: readable by their owner alone (600, 700 if executable)
    # (name, value) of the --env secrets: set in the environment the commands run in, never written nor printed; the
    # engine passes each by name from there (sbatch exports its environment, sky launch --env NAME reads it).
    environment: tuple[tuple[str, str], ...] = ()


def describe(plan: LaunchPlan) -> str:
    out = []
    brief = dict(plan.brief)
    for path, text in plan.files:
        out += [f"# --- file {path} ({brief[path]})"] if path in brief else [f"# --- file {path}", text.rstrip("\n")]
    if plan.commands:
        out.append("# --- submit")
        out += [step.shown if isinstance(step, Step) else line(*step) for step in plan.commands]
    for where, argv in plan.elsewhere:
        out += [f"# --- on {where}", line(*argv)]
    out += [f"# {note}" for note in plan.notes]
    if plan.environment and plan.commands:
        names = " ".join(name for name, _ in plan.environment)
        out.append(f"# {names}: --env secrets, in no file: the commands get them from their environment (export them)")
    out.append(f"# results: {plan.results}")
    return "\n".join(out) + "\n"


def write_files(plan: LaunchPlan) -> None:
    """All of the plan's files or, when one cannot be written, none of the new ones; one line, before any is
    written, where one would go over a file envkit launch did not write."""
    refuse_outside(Path.cwd(), (Path(path) for path, _ in plan.files))  # jobs/ is the project's, beside the config
    _never_over_the_users(plan)
    written = []
    try:
        for path, text in plan.files:
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            new = not os.path.lexists(target)
            executable = path in plan.executable
            mode = (0o700 if executable else 0o600) if plan.private else (0o755 if executable else None)
            write_text_atomic(target, text, mode=mode)
            written += [target] if new else []
    except OSError as exc:
        for target in written:  # an earlier job's file, written over, stays: only what this plan added goes
            target.unlink(missing_ok=True)
        raise EnvkitError(
            f"cannot write {exc.filename or 'the launch files'}: {exc.strerror}; choose a writable --output"
        ) from None


def _never_over_the_users(plan: LaunchPlan) -> None:
    """One line naming a file of the plan that is there and lacks envkit's mark. A file that holds no comment (a
    Kaggle kernel's kernel-metadata.json) is envkit's where a marked file of the plan is beside it."""
    paths = [Path(path) for path, _ in plan.files]
    marked = {path.parent for path in paths if os.path.lexists(path) and not marks.foreign(path, *_OURS)}
    for path in paths:
        if not marks.foreign(path, *_OURS):
            continue
        if path.suffix == ".json" and path.parent in marked and path.is_file() and not path.is_symlink():
            continue
        raise EnvkitError(
            f"{path} is not a file envkit launch wrote (it lacks the mark {MARK.strip()!r}): envkit never "
            "overwrites it; move it away, or write the job elsewhere with --output DIR"
        )


def submit(plan: LaunchPlan) -> None:
    if plan.before is not None:
        plan.before()
    write_files(plan)
    for step in plan.commands:
        step.run() if isinstance(step, Step) else run_client(step, plan.environment)


def run_client(argv: tuple[str, ...], environment: tuple[tuple[str, str], ...] = ()) -> None:
    """Run an engine client with its output live (a TPU run streams for hours), ``environment`` added to its
    environment; a failure is one line."""
    try:
        client = subprocess.Popen(
            list(argv), stderr=subprocess.PIPE, text=True, env={**os.environ, **dict(environment)}
        )
    except FileNotFoundError:
        raise EnvkitError(
            f"{argv[0]} not found on PATH: install the engine's client, or submit --dry-run's output yourself"
        ) from None
    last = ""
    for text in client.stderr:
        sys.stderr.write(text)
        last = text.strip() or last
    if client.wait() != 0:
        raise EnvkitError(f"{argv[0]} failed (exit {client.returncode}): {last or 'no message'}", exit_code=1)

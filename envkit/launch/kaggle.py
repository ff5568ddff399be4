"""Kaggle: push an experiment's notebook with `kaggle kernels push`, follow it, fetch its results.

Kaggle runs no containers: what runs is the notebook `envkit notebook` renders for a
Kaggle notebook target (it installs the target's lock into a fresh virtual environment),
beside a ``kernel-metadata.json`` whose ``machine_shape`` names the accelerator. The
kaggle CLI does the rest: ``kernels push -p DIR`` uploads and runs it, ``kernels status``
says when it ended, ``kernels output`` downloads what it left in /kaggle/working (the
notebook copies its results JSON to /kaggle/working/results/).

The CLI's own credentials (kaggle-cli: KAGGLE_API_TOKEN, KAGGLE_USERNAME with
KAGGLE_KEY, or access_token / kaggle.json / OAuth credentials in its config folder)
are looked for before anything is written, so a missing login is one line, not a
push that fails half-way.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from envkit.errors import EnvkitError
from envkit.launch import job as jobs
from envkit.launch.plan import LaunchPlan, Step
from envkit.launch.shell import line
from envkit.launch.spec import Engine, Option

# kaggle-cli's config folder: KAGGLE_CONFIG_DIR, else ~/.kaggle where it exists, else the XDG folder.
CREDENTIAL_FILES = ("access_token", "kaggle.json", "credentials.json")
RESULTS_PATTERN = r".*\.json$"
# `kaggle kernels status` prints: OWNER/SLUG has status "KernelWorkerStatus.COMPLETE"
_STATUS = re.compile(r'has status "(?:KernelWorkerStatus\.)?([A-Za-z_]+)"')
DONE, FAILED = {"complete"}, {"error", "cancel_requested", "cancel_acknowledged"}
_OWNER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,49}$")
_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{2,49}$")


def metadata(kernel: str, notebook_name: str, accelerator, private: bool = True) -> dict:
    """kernel-metadata.json (kaggle-cli docs/kernels_metadata.md): the notebook, on the accelerator, with internet
    (the notebook installs its lock from the package index and downloads its data)."""
    owner, slug = kernel.split("/")
    return {
        "id": kernel,
        "title": slug.replace("-", " "),  # Kaggle derives the slug from the title: it must give the id's
        "code_file": notebook_name,
        "language": "python",
        "kernel_type": "notebook",
        "is_private": "true" if private else "false",
        "enable_gpu": "false" if accelerator.is_tpu else "true",
        "enable_tpu": "true" if accelerator.is_tpu else "false",
        "enable_internet": "true",
        "machine_shape": accelerator.name,
        "dataset_sources": [],
        "competition_sources": [],
        "kernel_sources": [],
        "model_sources": [],
    }


def target(config, entry, name: str | None):
    """The Kaggle notebook target that runs ``entry``: ``name``, else the first of its kind; its notebook must
    hold the experiment."""
    from envkit.notebook.builder import fitting_experiment

    chosen = _kaggle_target(config, entry, name)
    fitting_experiment(config, chosen, entry.name)
    return chosen


def _kaggle_target(config, entry, name: str | None):
    from envkit.project.placement import NOTEBOOK, place

    if name is not None or any(t.platform == "kaggle" and entry.fits(t) for t in config.targets.values()):
        return place(config, entry, name, NOTEBOOK, "kaggle")[1]
    from envkit.project.notebook_platforms import load_platforms

    # Only accelerators envkit's data has for Kaggle, of the experiment's kind.
    kaggle = load_platforms().platforms["kaggle"]
    names = [name for name, accelerator in kaggle.accelerators.items() if accelerator.kind == entry.kind]
    if not names:
        raise EnvkitError(
            f"--on kaggle: {entry.name} is a {entry.kind} experiment, and Kaggle's accelerators "
            f"({', '.join(kaggle.accelerators)}) are none of that kind: run it with `envkit experiment {entry.name}`"
        )
    raise EnvkitError(
        f"--on kaggle: {config.path} has no Kaggle notebook target for {entry.name} ({entry.kind}): "
        f"add one (platform: kaggle, accelerator: one of {', '.join(names)})"
    )


def _kinds() -> tuple[str, ...]:
    """The kinds of Kaggle's accelerators (envkit/data/notebook_platforms.yaml), in kinds.yaml's order."""
    from envkit.project.kinds import names
    from envkit.project.notebook_platforms import load_platforms

    have = {accelerator.kind for accelerator in load_platforms().platforms["kaggle"].accelerators.values()}
    return tuple(kind for kind in names() if kind in have)


def _config_folders() -> list[Path]:
    configured = os.environ.get("KAGGLE_CONFIG_DIR")
    if configured:
        return [Path(configured)]
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "kaggle"
    return [Path.home() / ".kaggle", xdg]


def _configured_owner() -> str | None:
    if os.environ.get("KAGGLE_USERNAME"):
        return os.environ["KAGGLE_USERNAME"]
    from envkit.support.bounded_load import load_json

    for folder in _config_folders():
        if (folder / "kaggle.json").is_file():
            try:
                username = load_json(folder / "kaggle.json").get("username")
            except (EnvkitError, AttributeError):
                continue  # the CLI would not read it either; --kaggle-user names the account
            return username if isinstance(username, str) else None
    return None


def credentials() -> str | None:
    """Where the kaggle CLI would find its login, or None (looked for locally: nothing is asked of Kaggle)."""
    if os.environ.get("KAGGLE_API_TOKEN"):
        return "KAGGLE_API_TOKEN"
    if os.environ.get("KAGGLE_USERNAME") and os.environ.get("KAGGLE_KEY"):
        return "KAGGLE_USERNAME and KAGGLE_KEY"
    for folder in _config_folders():
        for name in CREDENTIAL_FILES:
            if (folder / name).is_file():
                return str(folder / name)
    return None


def check_client() -> str:
    """The kaggle CLI's path; EnvkitError (exit 2) when it is missing or has no login."""
    client = shutil.which("kaggle")
    if client is None:
        raise EnvkitError(
            "the kaggle CLI is not on PATH: pip install kaggle (then kaggle auth login), "
            "or push --dry-run's files yourself"
        )
    if credentials() is None:
        raise EnvkitError(
            "the kaggle CLI is not authenticated: run `kaggle auth login`, or set KAGGLE_API_TOKEN "
            "(a token from kaggle.com/settings), or put it in ~/.kaggle/access_token"
        )
    return client


def commands(kernel: str, folder: Path, results: Path) -> dict[str, tuple[str, ...]]:
    return {
        "push": ("kaggle", "kernels", "push", "-p", str(folder)),
        "status": ("kaggle", "kernels", "status", kernel),
        "output": ("kaggle", "kernels", "output", kernel, "-p", str(results), "--file-pattern", RESULTS_PATTERN, "-o"),
    }


def _owner(job: jobs.Job) -> str:
    owner = job.options.kaggle_user or _configured_owner()
    if owner is None:
        raise EnvkitError("name the Kaggle account the notebook goes to: --kaggle-user NAME (or KAGGLE_USERNAME)")
    if not _OWNER.match(owner):
        raise EnvkitError(f"--kaggle-user {owner!r} is not a Kaggle user name (letters, digits, '-', '_')")
    return owner


def check(job: jobs.Job) -> None:
    if job.nodes != 1 or job.extra_args:
        raise EnvkitError(
            "--on kaggle runs the experiment's notebook as rendered: one node, no recipe arguments after '--' "
            "(stop it on kaggle.com)"
        )
    if job.given_env:
        raise EnvkitError(
            f"--on kaggle runs the experiment's notebook as rendered, which --env cannot reach ({job.given_env[0]}): "
            "set a setting in the experiment's env: in envkit.yaml, and read a secret from Kaggle's secrets "
            "(Add-ons > Secrets) in the program"
        )
    if job.options.poll < 1 or job.options.wait < 1:
        raise EnvkitError("--poll and --wait take a positive number of seconds")
    _owner(job)


def _shown(path: Path) -> Path:
    """``path`` relative to the working directory where it is inside it, as the user would type it."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def plan(job: jobs.Job, output: Path) -> LaunchPlan:
    """The notebook envkit notebook renders for the job's Kaggle target beside its kernel-metadata.json, pushed with
    the kaggle CLI, followed until it ends, and its results fetched."""
    from envkit.notebook.builder import render_notebook
    from envkit.project.load import load_config
    from envkit.project.notebook_platforms import accelerator_of

    config = load_config(Path(job.config))
    notebook = render_notebook(config, job.experiment, job.target)
    _, accelerator = accelerator_of(config.target(job.target))
    kernel, folder = f"{_owner(job)}/{job.name}", output / job.name
    results = _shown(Path(job.results_dir)) / "kaggle" / job.name
    steps = commands(kernel, folder, results)
    code_file = str(folder / notebook.path.name)
    poll, wait = job.options.poll, job.options.wait
    return LaunchPlan(
        files=(
            (
                str(folder / "kernel-metadata.json"),
                json.dumps(metadata(kernel, notebook.path.name, accelerator), indent=2) + "\n",
            ),
            (code_file, notebook.text),
        ),
        brief=((code_file, f"envkit notebook, {len(notebook.text.encode()) // 1024} KiB"),),
        commands=(
            Step(line(*steps["push"]), lambda: _push(kernel, steps)),
            Step(
                f"# then every {poll} s until it completes: {line(*steps['status'])}",
                lambda: _wait(kernel, steps, poll, wait),
            ),
            Step(line(*steps["output"]), lambda: _fetch(kernel, results, steps)),
        ),
        results=f"under {results} (then: envkit report DIR)",
        before=check_client,
    )


def _push(kernel: str, steps) -> None:
    _client(steps["push"])
    print(
        f"envkit: pushed {kernel}; waiting for it to finish (Ctrl-C leaves it running: "
        f"{line(*steps['status'])}, then {line(*steps['output'])})",
        file=sys.stderr,
    )


def _wait(kernel: str, steps, poll_s: int, timeout_s: int) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        status = _status(_client(steps["status"], echo=False))
        if status in DONE:
            return
        if status in FAILED:
            raise EnvkitError(
                f"{kernel} ended with status {status.upper()} on Kaggle: see its log on kaggle.com "
                f"(its output: {line(*steps['output'])})",
                exit_code=1,
            )
        if time.monotonic() > deadline:
            raise EnvkitError(
                f"{kernel} is still {status} after {timeout_s} s; it keeps running: {line(*steps['status'])}",
                exit_code=1,
            )
        time.sleep(poll_s)


def _fetch(kernel: str, results: Path, steps) -> None:
    results.mkdir(parents=True, exist_ok=True)
    _client(steps["output"])
    found = sorted(results.rglob("*.json"))
    folders = sorted({path.parent for path in found})
    print(
        f"envkit: {len(found)} results file(s) from {kernel} in "
        + (
            ", ".join(str(folder) for folder in folders) + f"; compare them: envkit report {folders[0]}"
            if found
            else str(results)
        ),
        file=sys.stderr,
    )


def _status(text: str) -> str:
    match = _STATUS.search(text)
    if match is None:
        raise EnvkitError(f"kaggle kernels status said {' '.join(text.split())[:200]!r}, not a status", exit_code=1)
    return match.group(1).lower()


def _client(argv: tuple[str, ...], echo: bool = True) -> str:
    """Run the kaggle CLI; its output (shown unless ``echo`` is off), or EnvkitError with its last line."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise EnvkitError("the kaggle CLI is not on PATH: pip install kaggle (then kaggle auth login)") from None
    text = done.stdout + done.stderr
    if echo and text:
        sys.stderr.write(text)
    if "Authentication required" in text:
        # kaggle-cli prints its login help and exits 1 when Kaggle refuses the credentials.
        raise EnvkitError(
            "the kaggle CLI is not authenticated (Kaggle refused its credentials): run `kaggle auth login`"
        )
    if done.returncode != 0:
        last = next((row.strip() for row in reversed(text.splitlines()) if row.strip()), "no message")
        raise EnvkitError(f"{line(*argv[:3])} failed (exit {done.returncode}): {last}", exit_code=1)
    return text


@dataclass(frozen=True)
class NotebookEngine(Engine):
    """Kaggle runs no image: it picks its own kind of target (a Kaggle notebook target), names the job after the
    notebook's rule, runs every run of the experiment, and knows its kinds from its data."""

    runs_image: ClassVar[bool] = False
    one_run: ClassVar[bool] = False

    @property
    def kinds(self) -> tuple[str, ...]:
        return _kinds()

    def place(self, config, experiment, name: str | None):
        chosen = target(config, experiment, name)
        return experiment.on(chosen), chosen

    def default_name(self, experiment: str) -> str:
        return f"envkit-{experiment}"


ENGINE = NotebookEngine(
    name="kaggle",
    accelerators=(),
    options=(
        Option(
            "kaggle_user",
            "kaggle: the account the notebook goes to (default: KAGGLE_USERNAME, or kaggle.json's username); "
            "--name sets its slug (default envkit-EXPERIMENT), --target the Kaggle notebook target",
        ),
        Option(
            "poll", "kaggle: seconds between `kaggle kernels status` checks (default 60)", 60, int, metavar="SECONDS"
        ),
        Option(
            "wait",
            "kaggle: give up waiting after this long; the run goes on (default 43200)",
            12 * 3600,
            int,
            metavar="SECONDS",
        ),
    ),
    plan=plan,
    check=check,
    job_name=("valid: a Kaggle notebook slug is 3-50 lowercase letters, digits and '-'", _SLUG),
)

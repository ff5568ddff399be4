"""Render one experiment as a notebook for a notebook target (nbformat 4, checked with nbformat).

The notebook reads top to bottom: what it is (markdown from templates/notebook/),
the runtime check, the environment (the lock, installed into a fresh virtual
environment, or the runtime's own packages with --use-runtime), the program, the
run, and the result (envkit's report and plot). What runs is the experiment's program
(Experiment.program) with its runs' arguments, from the project's root, through the run wrapper:
a recipe experiment carries the recipe and the modules it imports (recipes/ at the scratch
folder's top); a command experiment carries the project's files (under ``project/``, its root).
A student reads the program: the recipe, or the command's script, is a visible ``%%writefile``
cell. Every other file it embeds (the helper envkit/notebook/runtime.py and its modules, the run wrapper, the
lock, the program's other files, envkit's report) is in one collapsed cell, a zip archive whose
sha256 that cell checks; each file is checked against its own sha256 before use.
Collapsed means Colab's form view (``cellView: form`` and a ``# @title`` line) and
``jupyter.source_hidden`` for Jupyter and Kaggle. The lock is in the notebook's metadata too
(``envkit.lock``), and its packages in a PEP 723 block, for uv and juv.

Output is deterministic: cell ids come from the cells' roles, keys are sorted, no
timestamps, so the same inputs give the same bytes (``envkit render --check``).
"""

from __future__ import annotations

import base64
import hashlib
import io
import pprint
import re
import shlex
import subprocess
import zipfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath

from envkit import __version__
from envkit.errors import EnvkitError
from envkit.lock.lockfile import LockFile
from envkit.lock.status import lock_status
from envkit.notebook import embedded
from envkit.notebook.runtime_shared import EXPERIMENTS
from envkit.project import kinds
from envkit.project.config import ProjectConfig, Target
from envkit.project.experiments import RECIPES, Experiment, excerpt
from envkit.project.experiments import experiment as find_experiment
from envkit.project.notebook_platforms import accelerator_of, load_platforms, refuse_too_few_devices
from envkit.project.output import Output
from envkit.runs.torchrun import started_program
from envkit.support import provenance
from envkit.support.bounded_load import load_bytes

WORK = "/tmp/envkit"
# Where a command experiment's project files go in the scratch folder, and where its command runs from: a
# folder of its own, so that no project file meets the notebook's own (venv/, results/, data/, report/, the lock).
PROJECT = "project"
PACKAGES = ("lock", "runtime")
_CELL_ID = re.compile(r"[^A-Za-z0-9]+")
_EXPANDED = set("{}$")  # what IPython expands in a magic's line: {expression} evaluated, $name replaced


@dataclass(frozen=True)
class Notebook:
    path: Path  # relative to the project root
    text: str


def notebook_path(output: Output, target: str, experiment: str, packages: str = "lock") -> Path:
    """<output.notebooks>/<target>/<experiment>.ipynb (-runtime.ipynb on the runtime's packages), beside the target's
    lock; relative to the project root."""
    return output.notebooks / target / f"{experiment}{'-runtime' if packages == 'runtime' else ''}.ipynb"


def rerender_command(target: str, experiment: str, packages: str) -> str:
    return f"envkit notebook {experiment} --target {target}" + (" --use-runtime" if packages == "runtime" else "")


def notebook_target(config: ProjectConfig, name: str) -> Target:
    target = config.target(name)
    if not target.is_notebook:
        others = [t.name for t in config.targets.values() if t.is_notebook]
        raise EnvkitError(
            f"target {name!r} is not a notebook target (it names no platform); notebook targets in "
            f"{config.path}: {', '.join(others) or 'none'}"
        )
    return target


def fitting_experiment(config: ProjectConfig, target: Target, name: str) -> Experiment:
    from envkit.project.placement import NOTEBOOK, place

    experiment, _ = place(config, find_experiment(name, config.path), target.name, NOTEBOOK)
    refuse_too_few_devices(experiment, target.name, target.platform, target.accelerator)
    return experiment


def colab_url(config: ProjectConfig, path: Path, revision: str) -> str | None:
    """'Open in Colab' for a notebook committed at ``revision`` of the project's GitHub repository; ``path`` is
    relative to the project's root, which may be a folder of the repository: the link names it from the top."""
    from envkit.project.notebook_platforms import platform

    match = re.match(r"^https://github\.com/([^/]+/[^/]+?)(\.git)?/?$", config.source or "")
    url = platform("colab").open_url
    if match is None or url is None:
        return None
    in_repository = repository_prefix(config.root) / path.as_posix()
    return url.format(repository=match.group(1), revision=revision, path=in_repository.as_posix())


@cache
def repository_prefix(root: Path) -> PurePosixPath:
    """The project's folder within its git repository (empty at its top, or where git knows no repository)."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--show-prefix"], cwd=root, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return PurePosixPath()
    return PurePosixPath(done.stdout.strip()) if done.returncode == 0 else PurePosixPath()


def render_notebook(
    config: ProjectConfig, experiment_name: str, target_name: str, packages: str = "lock", *, committed: bool = False
) -> Notebook:
    """The notebook; ``committed``: one of the targets' `notebooks` lists that render commits at its ``path``, which
    alone carries an "Open in Colab" link (to that path): a notebook written anywhere else is in no repository."""
    import nbformat
    from nbformat import v4

    target = notebook_target(config, target_name)
    experiment = fitting_experiment(config, target, experiment_name)
    platform, accelerator = accelerator_of(target)
    # The one entry into the lock: its status read it, checked it against the config's inputs and holds its text.
    status = lock_status(config, target.name)
    if status.state != "fresh":
        # A notebook installs exactly its lock: it must have one, made from what envkit.yaml now says.
        raise EnvkitError(f"a notebook of target {target.name} needs a fresh lock: {status.line()}")
    lock = status.lock
    path = notebook_path(config.output, target.name, experiment.name, packages)
    files, tracked, executable = _embedded_files(config, experiment, lock)
    rerender = rerender_command(target.name, experiment.name, packages)
    settings = _settings(target, experiment, platform, accelerator, files, packages, rerender)
    settings["executable"] = executable
    shown = _shown_file(experiment, files["program"])
    context = {
        "experiment": experiment,
        "target": target,
        "platform": platform,
        "accelerator": accelerator,
        "runtime": platform.runtime_of(accelerator),
        "packages": packages,
        "rerender": rerender,
        "commands": _commands(settings["program"], experiment),
        "program_file_count": len(files["program"]),
        "shown": shown,
        "project": PROJECT,
        "tracked": tracked,  # the project's files are git's list (False: a folder that is not a git work tree)
        "select": platform.how_to_select(accelerator),
        "lock": {
            "sha256": lock.sha256,
            "count": len(lock.packages),
            "python": target.python,
            "platform": lock.platform,  # a fresh lock's: the inputs it was resolved from are the config's
        },
        "checked": load_platforms().checked,
        "device_text": _device_text(accelerator),
        "open_url": colab_url(config, path, "main") if committed and platform.name == "colab" else None,
    }
    cells = _cells(_markdown(config, context), files, shown, settings, lock, target, experiment, packages, rerender)
    notebook = v4.new_notebook(cells=cells, metadata=_metadata(accelerator, settings, files, lock, target))
    try:
        nbformat.validate(notebook)
    except nbformat.ValidationError as exc:
        raise EnvkitError(f"{path}: not a valid notebook: {' '.join(str(exc).split())[:200]}") from None
    text = nbformat.writes(notebook)
    return Notebook(path, text if text.endswith("\n") else text + "\n")


def _cells(markdown, files, shown, settings, lock, target, experiment, packages, rerender) -> list:
    """The notebook's cells, top to bottom: what it is, the runtime check, the environment, the program, the run
    and the result; the program file a reader sees is a cell, every other file is in the collapsed archive."""
    from nbformat import v4

    shown_file = {shown: files["program"][shown]} if shown else {}
    packed = {path: entry for group in files.values() for path, entry in group.items() if path not in shown_file}
    carried = "the recipe's modules" if experiment.recipe else "the project's files"
    return [
        v4.new_markdown_cell(markdown["intro"], id="what-it-is"),
        _collapsed_cell(
            "PEP 723: the lock's packages, for uv and juv", _pep723(lock.packages, target.python), id="pep-723"
        ),
        v4.new_markdown_cell(markdown["runtime"], id="runtime-check-md"),
        _collapsed_cell(
            "This notebook's settings, rendered by envkit from envkit.yaml and envkit/data/: re-render, do not edit",
            _settings_cell(settings),
            id="settings",
        ),
        _collapsed_cell(
            f"envkit's files: its notebook helper and run wrapper, the lock, {carried}, the report "
            f"({len(packed)} files)",
            _archive_cell(packed, rerender),
            id="files",
        ),
        v4.new_code_cell(
            'import envkit_notebook as nb\n\nnb.check_files(SETTINGS, "helper")\nruntime = nb.check_runtime(SETTINGS)',
            id="runtime-check",
        ),
        v4.new_markdown_cell(markdown["environment"], id="environment-md"),
        v4.new_code_cell(
            'nb.check_files(SETTINGS, "lock")\nenvironment = nb.'
            + ("create_environment(SETTINGS)" if packages == "lock" else "runtime_environment(SETTINGS)"),
            id="environment",
        ),
        v4.new_markdown_cell(markdown["recipe"], id="recipe-md"),
        *_file_cells(shown_file),
        v4.new_code_cell('nb.check_files(SETTINGS, "program")', id="recipe-check"),
        v4.new_markdown_cell(markdown["run"], id="run-md"),
        v4.new_code_cell("results = nb.run_program(SETTINGS, environment, runtime)", id="run"),
        v4.new_markdown_cell(markdown["result"], id="result-md"),
        # The results first: a report that cannot be drawn must not keep them in the runtime.
        v4.new_code_cell(
            'nb.offer(SETTINGS, results)\nnb.check_files(SETTINGS, "report")\nnb.show_report(SETTINGS)', id="result"
        ),
    ]


def _metadata(accelerator, settings: dict, files, lock: LockFile, target: Target) -> dict:
    """The notebook's metadata: its kernel, the platform's accelerator settings and envkit's record (what it runs,
    every file's sha256, and the lock itself, for tools that read a notebook's environment from its metadata)."""
    return {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
        **accelerator.metadata,
        "envkit": {
            "rendered_by": f"envkit {__version__}",
            "experiment": settings["experiment"],
            "target": target.name,
            "platform": settings["platform"],
            "accelerator": accelerator.name,
            "packages": settings["packages"],
            "runs": [run["summary"] for run in settings["runs"]],
            "files": {path: sha for group in files.values() for path, (sha, _) in group.items()},
            "lock": {
                "sha256": lock.sha256,
                "python": target.python,
                "platform": lock.platform,
                "requirements": lock.text,
            },
        },
    }


def _runs(experiment: Experiment) -> list[dict]:
    """The experiment's runs, in order (E1: one; E3: four), each with its CPU-mode arguments: a recipe's
    accelerator options swapped for the CPU's; a command's own arguments unchanged (nothing is forced on it:
    ENVKIT_DEVICE says cpu)."""
    cpu_mode_args = load_platforms().cpu_mode_args if experiment.recipe else list
    return [
        {"summary": run.summary, "args": list(run.argv), "cpu_args": cpu_mode_args(run.argv)} for run in experiment.runs
    ]


def _commands(program: list[str], experiment: Experiment) -> list[str]:
    return [shlex.join([*program, *run.argv]) for run in experiment.runs]


def _device_text(accelerator) -> str:
    device = accelerator.device
    if accelerator.is_tpu:
        return (
            f"{device['chips']} TPU {device['tpu']} chip(s) ({accelerator.devices} cores, one replica each), "
            "found on the PCI bus"
        )
    return f"at least {device['count']} NVIDIA GPU(s) whose name holds {device['gpu']}, as nvidia-smi lists them"


def _embedded_files(
    config: ProjectConfig, experiment: Experiment, lock: LockFile
) -> tuple[dict[str, dict[str, tuple[str, bytes]]], bool, list[str]]:
    """group -> notebook path -> (sha256, bytes) of every file the notebook writes out; whether the program's
    files are git's list (a recipe's are found from its imports: True); and which of them are executable
    (a command may be a script of the project's, ./run.sh, and an archive unpacks without modes)."""

    def entry(source: Path | str) -> tuple[str, bytes]:
        data = source.encode("utf-8") if isinstance(source, str) else load_bytes(source)
        return hashlib.sha256(data).hexdigest(), data

    if experiment.recipe is not None:
        recipes = config.root / RECIPES
        program = {
            f"{RECIPES}/{path.relative_to(recipes).as_posix()}": entry(path)
            for path in embedded.recipe_files(recipes, experiment.recipe)
        }
        tracked, executable = True, []
    else:
        paths, tracked = embedded.project_files(config, experiment.program)
        program = {f"{PROJECT}/{path}": entry(config.root / path) for path in paths}
        executable = [f"{PROJECT}/{path}" for path in paths if (config.root / path).stat().st_mode & 0o111]
    # envkit's report is this envkit's own: its files relative to the folder holding the envkit package.
    package_parent = Path(embedded.__file__).resolve().parents[2]
    report = embedded.report_files(package_parent)
    files = {
        "helper": {
            **{name: entry(path) for name, path in embedded.helper_files().items()},
            **{name: entry(path) for name, path in provenance.shipped().items()},
        },
        "lock": {"requirements.lock": (lock.sha256, lock.text.encode("utf-8"))},
        "program": program,
        "report": {
            **{f"report/{name}": entry(path) for name, path in report.items()},
            f"report/{EXPERIMENTS}": entry(excerpt(config.path, experiment.name, experiment.kind)),
        },
    }
    return files, tracked, executable


def _shown_file(experiment: Experiment, program: dict[str, tuple[str, bytes]]) -> str | None:
    """The program file a reader sees as a cell: the recipe, or the command's script where it is a project file
    (python train.py: train.py); None when the command names none (python -m pkg). Only a file that %%writefile
    writes back exactly: UTF-8 text that ends in a newline (IPython adds one to a cell), with no carriage return."""
    if experiment.recipe is not None:
        candidates = [f"{RECIPES}/{experiment.recipe}.py"]
    else:
        candidates = [f"{PROJECT}/{PurePosixPath(word).as_posix()}" for word in experiment.program]
    for path in candidates:
        data = program.get(path, (None, b""))[1]
        if data.endswith(b"\n") and b"\r" not in data and _is_utf8(data) and _magic_line(path):
            return path
    return None


def _magic_line(path: str) -> str | None:
    """``path`` as %%writefile's argument, or None where it cannot stand there as itself. IPython expands a magic
    line before it parses it: ``{expression}`` is evaluated, ``$name`` and a leading ``~`` replaced. A name holding
    any of them is never put there (its file stays in the archive cell, checked by its sha256 like the others).
    IPython splits the line as a non-POSIX shell would and %%writefile strips one pair of quotes around the name:
    a name with spaces or one kind of quote is quoted with the other kind."""
    if set(path) & _EXPANDED or path.startswith("~") or not path.isprintable():
        return None
    if not any(char.isspace() or char in "'\"" for char in path):
        return path
    quote = next((quote for quote in "'\"" if quote not in path), None)
    return f"{quote}{path}{quote}" if quote else None


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def runtime_settings(platform, accelerator) -> dict:
    """What the notebook's runtime check reads: the accelerator it needs, how to pick it, the runtime envkit knows."""
    data = load_platforms()
    runtime = platform.runtime_of(accelerator)
    known = runtime.packages()
    known["source"] = (
        ", ".join(sorted({runtime.facts[name].cite() for name in runtime.packages()})) or "no packages recorded"
    )
    return {
        "platform": platform.name,
        "platform_title": platform.title,
        "accelerator": accelerator.name,
        "label": accelerator.label,
        "select": platform.how_to_select(accelerator),
        "device": accelerator.device,
        "tpu_chips": {"vendor": data.tpu_vendor, "devices": data.tpu_chips},
        "runtime_known": known,
        "runtime_version_env": list(platform.runtime_version_env),
    }


def _settings(target, experiment, platform, accelerator, files, packages, rerender) -> dict:
    kind = kinds.kind(target.kind)
    from envkit.render.target_files import run_env

    paths = [path for group in files.values() for path in group]
    return {
        "experiment": experiment.name,
        "target": target.name,
        "rerender": rerender,
        **runtime_settings(platform, accelerator),
        "output": platform.output,
        "packages": packages,
        "lock": {"path": "requirements.lock", "python": target.python},
        # What runs from the project's root (the scratch folder's top for a recipe, project/ for a command's
        # files), each run's arguments after it; a leading python is the environment's interpreter. A torchrun
        # script runs under torchrun with a process per GPU of the accelerator, as on a host (CPU mode: on the CPU).
        "program": list(started_program(experiment, accelerator.device.get("count"))),
        "root": "." if experiment.recipe is not None else PROJECT,
        "env": run_env(kind, target),
        "experiment_env": dict(experiment.env),  # the experiment's own variables, in CPU mode too
        "run_device": kind.device,  # ENVKIT_DEVICE, the CPU in CPU mode
        "wrapper": provenance.FILE_NAME,  # every run starts through it (envkit/support/provenance.py)
        "runs": _runs(experiment),
        "folders": sorted({Path(path).parent.as_posix() for path in paths} - {"."}),
        "files": {group: {path: sha for path, (sha, _) in entries.items()} for group, entries in files.items()},
    }


def _settings_cell(settings: dict) -> str:
    return "\n".join(
        [
            f"SETTINGS = {pprint.pformat(settings, width=110, sort_dicts=False, compact=True)}",
            "",
            "import os",
            "from pathlib import Path",
            "",
            "# A scratch folder for the environment, the recipe, its data and results.",
            f'WORK = Path(os.environ.get("ENVKIT_NOTEBOOK_WORK", "{WORK}"))',
            'for folder in SETTINGS["folders"]:',
            "    (WORK / folder).mkdir(parents=True, exist_ok=True)",
            "os.chdir(WORK)",
            'print(f"working in {WORK}")',
        ]
    )


def _file_cells(group: dict[str, tuple[str, bytes]]) -> list:
    from nbformat import v4

    # IPython's %%writefile writes the cell's body exactly: the file's bytes, which check_files compares.
    return [
        v4.new_code_cell(f"%%writefile {_magic_line(path)}\n{data.decode('utf-8')}", id=_cell_id("file", path))
        for path, (_, data) in group.items()
    ]


def _collapsed_cell(title: str, source: str, *, id: str):
    """A code cell shown by its title: Colab's form view, and source_hidden for Jupyter and Kaggle."""
    from nbformat import v4

    metadata = {"cellView": "form", "jupyter": {"source_hidden": True}}
    return v4.new_code_cell(f"# @title {title}\n{source}", id=id, metadata=metadata)


def _archive(files: dict[str, tuple[str, bytes]]) -> bytes:
    """The files as a zip, the same bytes for the same files: stored (no compressor's version in
    the output), in path order, with a fixed time and mode."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for path in sorted(files):
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[path][1])
    return buffer.getvalue()


def _archive_cell(files: dict[str, tuple[str, bytes]], rerender: str) -> str:
    """Standard-library code that checks the archive's sha256 and unpacks it (the helper is in it)."""
    data = _archive(files)
    encoded = base64.b64encode(data).decode("ascii")
    lines = "\n".join(encoded[start : start + 100] for start in range(0, len(encoded), 100))
    return "\n".join(
        [
            "# One zip archive (base64) of every file this notebook runs besides the recipe below;",
            "# each file is checked against its own sha256 in SETTINGS before use.",
            "import base64, hashlib, io, zipfile",
            "",
            f'ARCHIVE = """\n{lines}\n"""',
            "data = base64.b64decode(ARCHIVE)",
            f'if hashlib.sha256(data).hexdigest() != "{hashlib.sha256(data).hexdigest()}":',
            "    raise RuntimeError(\"this cell's archive changed since envkit rendered it: re-render the "
            f'notebook with `{rerender}`")',
            "with zipfile.ZipFile(io.BytesIO(data)) as archive:",
            "    archive.extractall()",
            'print(f"{len(archive.namelist())} files unpacked, the archive matches its sha256")',
        ]
    )


def _cell_id(*parts: str) -> str:
    return _CELL_ID.sub("-", "-".join(parts)).strip("-")[:64]


def _pep723(packages: dict[str, str], python: str) -> str:
    lines = [
        "# The lock's packages as PEP 723 inline script metadata, for uv and juv (exact versions; their sha256",
        "# hashes are in requirements.lock below and in this notebook's metadata, envkit.lock).",
        "# /// script",
        f'# requires-python = "=={python}.*"',
        "# dependencies = [",
    ]
    lines += [f'#   "{name}=={version}",' for name, version in sorted(packages.items())]
    lines += ["# ]", "# ///"]
    return "\n".join(lines)


def _markdown(config: ProjectConfig, context: dict) -> dict[str, str]:
    from envkit.render.target_files import render_template, template_environment

    env = template_environment(config.root)
    return {
        name: render_template(env, f"notebook/{name}.md.j2", context).rstrip("\n")
        for name in ("intro", "runtime", "environment", "recipe", "run", "result")
    }

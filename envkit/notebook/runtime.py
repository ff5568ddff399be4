"""envkit's notebook helper, embedded verbatim in every notebook envkit renders (as envkit_notebook.py).

It runs in the notebook platform's own kernel (Colab, Kaggle, or a test's CPU mode),
with the standard library only, and imports no installed envkit: the notebook carries
everything it needs, nothing is cloned. One step imports envkit: ``show_report`` loads envkit's
report modules from the copy the notebook embeds beside this file (``REPORT``). The notebook's cells call one function
per step, each with the notebook's SETTINGS (rendered from envkit's data):

- ``check_files``: the embedded files are the ones envkit rendered (sha256); an
  edited cell is one line saying to re-render;
- ``check_runtime``: the accelerator is present and of the expected kind (one line
  naming the platform's menu path when not); the runtime's Python and preinstalled
  torch / torch_xla / libtpu are recorded;
- ``create_environment``: a fresh virtual environment holding exactly the lock,
  hash-checked, on the lock's Python (uv provides it where the runtime has another;
  the platform's UV_* and PIP_* settings are left out); or ``runtime_environment``:
  the runtime's own packages, and how they differ from the lock;
- ``run_program``: the experiment's program (a recipe, or the project's command) from the
  project's root in that environment, through the run wrapper, with live progress; then the
  notebook's provenance added to each results file;
- ``offer``: the results file for download, or in the platform's output folder;
- ``show_report``: envkit's own report table and plot of the results, and the comparison as one HTML
  page (``envkit report --html``), saved or offered as the results are.

A failure is ``NotebookStop``: one line in the notebook, and "Run all" stops there.

This file holds the steps the cells call; the modules it imports ship beside it under their own names
(envkit.notebook.embedded.helper_files finds them from its imports): runtime_shared.py (the notebook's folders, its
stop, CPU mode), runtime_stream.py (a program run with its output shown as it comes), runtime_accelerator.py (the
runtime check) and runtime_venv.py (the environment).

CPU mode (what envkit's tests run): ENVKIT_NOTEBOOK_CPU names a wheelhouse holding
a CPU lock (requirements.lock) and its wheels. The accelerator check then only
records what it finds, the environment installs that lock offline from that
wheelhouse on this kernel's Python, and the program runs on the CPU (ENVKIT_DEVICE=cpu;
a recipe with the notebook's CPU arguments). ENVKIT_NOTEBOOK_WORK sets the scratch folder,
ENVKIT_NOTEBOOK_OUTPUT the folder the results are offered in, and
ENVKIT_NOTEBOOK_INSTALLER (uv or pip) the installer.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path

try:  # in envkit: modules of envkit.notebook, and the run wrapper's bounded reader (envkit.support)
    from ..support.provenance_records import Unreadable, parse_json, read_regular
    from .runtime_accelerator import check_runtime
    from .runtime_shared import DATA, EXPERIMENTS, OUTPUT, REPORT, RESULTS, NotebookStop, cpu_mode, sha256_of
    from .runtime_stream import stream
    from .runtime_venv import create_environment, runtime_environment
except ImportError:  # in a notebook, as envkit_notebook.py: its modules and the run wrapper's are beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from provenance_records import Unreadable, parse_json, read_regular
    from runtime_accelerator import check_runtime
    from runtime_shared import DATA, EXPERIMENTS, OUTPUT, REPORT, RESULTS, NotebookStop, cpu_mode, sha256_of
    from runtime_stream import stream
    from runtime_venv import create_environment, runtime_environment

# The steps the notebook's cells call (nb.check_runtime(SETTINGS), ...), and what they stop with.
__all__ = [
    "NotebookStop",
    "check_files",
    "check_runtime",
    "create_environment",
    "runtime_environment",
    "run_program",
    "offer",
    "show_report",
]


# ---------------------------------------------------------------------------- embedded files


def check_files(settings: dict, group: str) -> None:
    """The files of ``group`` (written by the cells above) are exactly the ones envkit rendered."""
    for path, expected in settings["files"][group].items():
        if not Path(path).is_file():
            raise NotebookStop(f"{path} is missing: run the cells above in order (Run all)")
        found = sha256_of(Path(path))
        if found != expected:
            raise NotebookStop(
                f"{path} changed since this notebook was rendered (sha256 {found[:12]}, rendered {expected[:12]}): "
                f"re-render the notebook with `{settings['rerender']}`"
            )
    print(f"{len(settings['files'][group])} {group} file(s) match their sha256")


# ---------------------------------------------------------------------------- the runtime


# ---------------------------------------------------------------------------- the environment


# ---------------------------------------------------------------------------- the run


def run_program(settings: dict, environment: dict, runtime: dict) -> list[Path]:
    """Each of the experiment's runs of its program from the project's root, in the environment, through the
    run wrapper, with live progress; the results files they wrote."""
    cpu = cpu_mode() is not None
    env = dict(os.environ)
    # Absolute: the program runs from the project's root, which is not the scratch folder for a command.
    python = os.path.abspath(environment["python"])  # not resolved: venv/bin/python is a link out of the venv
    if environment["packages"] == "lock":
        # Only the venv's packages: none of the platform's PYTHON* settings (Colab and Kaggle set PYTHONPATH), no user
        # site (-s, PYTHONNOUSERSITE). Removed from the environment rather than ignored with -E, which would also
        # ignore the PYTHONPATH the run wrapper gives the program: its start-up module reports the device used and
        # whether dvclive was imported. Every Python the program starts (torchrun's workers, a shell script's) is
        # alike; the experiment's own PYTHON* settings are added below.
        flags = ["-s", "-u"]
        env = {name: value for name, value in env.items() if not name.startswith("PYTHON")}
        env["ENVKIT_LOCK_SHA256"] = environment["lock_sha256"]
        # the lock it was installed from (in CPU mode the wheelhouse's, not the notebook's): the record's lock drift
        env["ENVKIT_LOCK_FILE"] = os.path.abspath(environment["lock"])
        # A program that is not `python ...` (a shell script, torchrun) finds the venv's commands first.
        venv = Path(python).parent.parent
        env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv), PYTHONNOUSERSITE="1")
    else:
        flags = ["-u"]
        env.pop("ENVKIT_LOCK_SHA256", None)
        env.pop("ENVKIT_LOCK_FILE", None)
    if not cpu:
        env.update(settings["env"])
    env.update(settings["experiment_env"])
    # Nothing is added to the command: its locations and device are variables, as run.sh gives them.
    env.update(ENVKIT_DATA_DIR=str(DATA.resolve()), ENVKIT_RESULTS_DIR=str(RESULTS.resolve()))
    env["ENVKIT_DEVICE"] = "cpu" if cpu else settings["run_device"]
    env["ENVKIT_EXPERIMENT"] = settings["experiment"]
    env["ENVKIT_TARGET"] = settings["target"]
    root = Path(settings["root"])
    for folder in (RESULTS, DATA, root):
        folder.mkdir(exist_ok=True)
    for path in settings["executable"]:  # the archive unpacked them without their modes
        Path(path).chmod(0o755)
    wrapper = os.path.abspath(settings["wrapper"])
    before = set(RESULTS.glob("*.json"))
    for number, run in enumerate(settings["runs"], 1):
        if len(settings["runs"]) > 1:
            print(f"run {number}/{len(settings['runs'])}: {run['summary']}", flush=True)
        args = run["cpu_args"] if cpu else run["args"]
        shown = shlex.join([*settings["program"], *args])
        print(f"$ {shown}" + (f"   (in {root}/)" if settings["root"] != "." else ""), flush=True)
        # Through the run wrapper, as in an image: the record gains its exit status, wall time and argv.
        argv = [python, *flags, wrapper, *program_argv(settings["program"], python, flags), *args]
        code, last = stream(argv, env, root)
        if code != 0:
            raise NotebookStop(f"{shown} failed (exit {code}): {last}")
    written = [
        path for path in sorted(set(RESULTS.glob("*.json")) - before) if record(path, settings, environment, runtime)
    ]
    print("results: " + ", ".join(str(path) for path in written))
    return written


def program_argv(program: list[str], python: str, flags: list[str]) -> list[str]:
    """The program's argv, a leading ``python`` (or ``python3``) as the environment's interpreter."""
    head, *rest = program
    return [python, *flags, *rest] if head in ("python", "python3") else list(program)


def record(path: Path, settings: dict, environment: dict, runtime: dict) -> bool:
    """Add where the run ran and on which packages to a results file (its optional ``notebook`` block); False, with
    one line naming it, where ``path`` is not a record to add it to. The program may leave anything in the results
    folder: it is read as the run wrapper reads what a program left (provenance_records.read_regular), a regular
    file of at most 16 MiB, nested at most 64 deep, never through a symbolic link (it may lead to a credentials
    file) nor waited on (a FIFO); what is left out is not offered either."""
    try:
        document = parse_json(read_regular(path))
    except Unreadable as exc:
        print(f"left out {path}: {exc}")
        return False
    if not isinstance(document, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(document), "a number"
        )
        print(f"left out {path}: {kind}, not a results record (a JSON object)")
        return False
    document["notebook"] = {
        "platform": settings["platform"],
        "accelerator": settings["accelerator"],
        "found": runtime["found"],
        "cpu_mode": cpu_mode() is not None,
        "experiment": settings["experiment"],
        "target": settings["target"],
        "packages": environment["packages"],
        "lock_sha256": environment["lock_sha256"],
        "installer": environment["installer"],
        "lock_differences": environment["lock_differences"],
        "runtime": {"python": runtime["python"], "version": runtime["version"], "packages": runtime["packages"]},
        "files": {**settings["files"]["helper"], **settings["files"]["lock"], **settings["files"]["program"]},
    }
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(temporary, path)
    return True


# ---------------------------------------------------------------------------- the result


def offer(settings: dict, results: list[Path]) -> None:
    """The results files: in the platform's output folder, or offered for download."""
    _deliver(settings, results, RESULTS.name)


def _deliver(settings: dict, paths: list[Path], what: str, replace: bool = False) -> None:
    """``paths`` in the platform's output folder's results/ (``replace``: under their own names, over an earlier
    copy; else beside earlier copies), or offered for download; one line says where."""
    output = settings["output"]
    folder = os.environ.get(OUTPUT) or (
        output["path"] if output["method"] == "directory" and cpu_mode() is None else None
    )
    if folder:
        target = Path(folder) / RESULTS
        target.mkdir(parents=True, exist_ok=True)
        saved = [shutil.copy2(path, target / path.name) if replace else _copy_beside(path, target) for path in paths]
        print(f"{what} saved in {target}/: " + ", ".join(Path(path).name for path in saved))
    elif cpu_mode() is None:
        from google.colab import files  # Colab's own download

        for path in paths:
            files.download(str(path))
        print(f"{what} offered for download: " + ", ".join(path.name for path in paths))
    else:
        print(f"CPU mode without {OUTPUT}: {what} stay in {RESULTS.resolve()}/")


def _copy_beside(path: Path, folder: Path) -> Path:
    """Copy ``path`` into ``folder`` under a name no earlier run took there (-2, -3, ...)."""
    for attempt in range(1, 10_000):
        target = folder / (path.name if attempt == 1 else f"{path.stem}-{attempt}{path.suffix}")
        if not target.exists():
            shutil.copy2(path, target)
            return target
    raise NotebookStop(f"no free name for {path.name} in {folder}")


def show_report(settings: dict) -> None:
    """envkit's report of every result in ./results: the table (with the published numbers), its plot, and the
    comparison as one HTML page, saved or offered as the results are."""
    sys.path.insert(0, str(REPORT.resolve()))
    try:
        import yaml  # noqa: F401 - imported where the report reads its report.yaml, after this guard

        from envkit.errors import EnvkitError  # envkit's own one-line errors, from the embedded copy
        from envkit.runs.figures import require_matplotlib
        from envkit.runs.formats import render_report
        from envkit.runs.page_adapter import write_report_page
        from envkit.runs.plot import write_plot
        from envkit.runs.report import build_report
        from envkit.runs.results import load_results
    except ImportError as exc:
        raise NotebookStop(
            f"envkit's report needs PyYAML and jsonschema in this kernel ({exc}): pip install pyyaml jsonschema"
        ) from None
    finally:
        sys.path.remove(str(REPORT.resolve()))
    try:
        results, warnings = load_results(RESULTS)
        for warning in warnings:
            print(f"warning: {warning}")
        report = build_report(results, reference=True, config=REPORT / EXPERIMENTS)
    except EnvkitError as exc:
        raise NotebookStop(str(exc)) from None
    for warning in report.warnings:
        print(f"warning: {warning}")
    from IPython.display import Image, Markdown, display

    display(Markdown(render_report(report, "md")))
    picture = RESULTS / "comparison.png"
    try:
        for line in write_plot(report, picture):
            print(f"the plot leaves out {line}")
        display(Image(filename=str(picture)))
    except EnvkitError as exc:
        # The table is the comparison; a program that reports no per-epoch times has nothing to plot.
        print(f"no plot: {exc}")
    page = RESULTS / "comparison.html"
    try:
        require_matplotlib()  # the page's figures
        size = write_report_page(report, warnings, page)
    except EnvkitError as exc:
        print(f"no page: {exc}")
        return
    except ImportError as exc:  # its template's Jinja2 (Colab and Kaggle have it): the table above stands
        print(f"no page: it needs {exc.name} in this kernel ({exc}): pip install {exc.name}")
        return
    # One file that opens offline anywhere: the report of every result so far, so it replaces an earlier one.
    _deliver(settings, [page], f"the comparison page ({size / 1e6:.2f} MB, opens offline in a browser)", replace=True)

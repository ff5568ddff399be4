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

CPU mode (what envkit's tests run): ENVKIT_NOTEBOOK_CPU names a wheelhouse holding
a CPU lock (requirements.lock) and its wheels. The accelerator check then only
records what it finds, the environment installs that lock offline from that
wheelhouse on this kernel's Python, and the program runs on the CPU (ENVKIT_DEVICE=cpu;
a recipe with the notebook's CPU arguments). ENVKIT_NOTEBOOK_WORK sets the scratch folder,
ENVKIT_NOTEBOOK_OUTPUT the folder the results are offered in, and
ENVKIT_NOTEBOOK_INSTALLER (uv or pip) the installer.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import platform
import re
import select
import shlex
import shutil
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path

CPU_MODE = "ENVKIT_NOTEBOOK_CPU"
OUTPUT = "ENVKIT_NOTEBOOK_OUTPUT"
INSTALLER = "ENVKIT_NOTEBOOK_INSTALLER"
PCI_DEVICES = Path("/sys/bus/pci/devices")
VENV = Path("venv")
RESULTS = Path("results")
DATA = Path("data")
REPORT = Path("report")  # envkit's report code, embedded: imported from here
EXPERIMENTS = "experiments.json"  # the notebook's experiment as the project defines it, beside the report code
RUNTIME_PACKAGES = ("torch", "torch_xla", "libtpu")


class NotebookStop(Exception):
    """A step cannot go on: shown as one line, and the notebook stops there."""


def _show_one_line(shell, etype, value, tb, tb_offset=None) -> list[str]:
    lines = [f"envkit: {value}"]
    show = getattr(shell, "_showtraceback", None)  # how IPython (and ipykernel) send an error output
    if show is not None:
        show(etype, value, lines)
    else:
        print(lines[0], file=sys.stderr)
    return lines


def _one_line_errors() -> None:
    # IPython shows a NotebookStop as its message alone (no traceback); the cell still fails,
    # so "Run all" stops at it. Only where IPython already runs (a notebook's kernel): envkit imports this module
    # for its constants, and importing IPython would cost every notebook render a fifth of a second.
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return
    shell = ipython.get_ipython()
    if shell is not None:
        shell.set_custom_exc((NotebookStop,), _show_one_line)


_one_line_errors()


def cpu_mode() -> Path | None:
    """The wheelhouse of CPU mode, or None on a real accelerator."""
    folder = os.environ.get(CPU_MODE)
    return Path(folder) if folder else None


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def normalise(name: str) -> str:  # PEP 503, as envkit.lock.lockfile.normalise (the helper imports no envkit)
    return re.sub(r"[-_.]+", "-", name).lower()


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


def find_tpus(chips: dict, pci_devices: Path = PCI_DEVICES) -> dict[str, int]:
    """TPU chips on the PCI bus by name (v5e: 8), read from sysfs: no TPU runtime starts."""
    found: collections.Counter = collections.Counter()
    for device in sorted(pci_devices.glob("*")):
        try:
            if (device / "vendor").read_text().strip() != chips["vendor"]:
                continue
            device_id = (device / "device").read_text().strip()
            subsystem = (
                (device / "subsystem_device").read_text().strip() if (device / "subsystem_device").exists() else ""
            )
        except OSError:
            continue
        entry = chips["devices"].get(f"{device_id}:{subsystem}") or chips["devices"].get(device_id)
        if entry:
            found[entry["chip"]] += 1
    return dict(found)


def find_gpus(nvidia_smi: str = "nvidia-smi") -> list[str]:
    """The NVIDIA GPUs' names, from nvidia-smi (none when it is missing or fails)."""
    if shutil.which(nvidia_smi) is None:
        return []
    try:
        done = subprocess.run(
            [nvidia_smi, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


def describe_found(tpus: dict[str, int], gpus: list[str]) -> str:
    parts = [f"TPU {chip} ×{count}" for chip, count in sorted(tpus.items())]
    parts += [f"{name} ×{count}" for name, count in sorted(collections.Counter(gpus).items())]
    return ", ".join(parts) or "no accelerator (CPU only)"


def accelerator_problem(settings: dict, tpus: dict[str, int], gpus: list[str]) -> str | None:
    """Why this runtime is not the notebook's accelerator, as one line with the fix; None when it is."""
    device = settings["device"]
    if "tpu" in device:
        fits = tpus == {device["tpu"]: device["chips"]}
    else:
        # A whole word of the name: an L4 is not an L40S.
        model = re.compile(rf"(?<![A-Za-z0-9]){re.escape(device['gpu'])}(?![A-Za-z0-9])", re.IGNORECASE)
        fits = sum(bool(model.search(name)) for name in gpus) >= device["count"]
    if fits:
        return None
    return (
        f"this runtime has {describe_found(tpus, gpus)}, but this notebook runs on {settings['platform_title']}'s "
        f"{settings['label']}: {settings['select']}"
    )


def installed_version(distribution: str) -> str | None:
    """A distribution's version in this kernel, looked up without importing it."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def check_runtime(settings: dict, pci_devices: Path = PCI_DEVICES, nvidia_smi: str = "nvidia-smi") -> dict:
    """Refuse the wrong accelerator (one line with the fix); record the runtime as found."""
    tpus, gpus = find_tpus(settings["tpu_chips"], pci_devices), find_gpus(nvidia_smi)
    found = describe_found(tpus, gpus)
    cpu = cpu_mode() is not None
    if not cpu:
        problem = accelerator_problem(settings, tpus, gpus)
        if problem:
            raise NotebookStop(problem)
    runtime = {
        "found": found,
        "python": platform.python_version(),
        "version": {name: os.environ.get(name) for name in settings["runtime_version_env"]},
        "packages": {name: installed_version(name) for name in RUNTIME_PACKAGES},
    }
    expected = f"{settings['platform_title']}'s {settings['label']}"
    print(f"accelerator: {found}" + (f" (CPU mode: {expected} is not checked)" if cpu else f", as {expected} needs"))
    print(f"python: {runtime['python']}")
    print("preinstalled: " + ", ".join(f"{name} {version or 'none'}" for name, version in runtime["packages"].items()))
    print("runtime version: " + (", ".join(f"{k}={v}" for k, v in runtime["version"].items() if v) or "not shown"))
    known = settings["runtime_known"]
    drift = [
        f"{name} {known[name]} -> {runtime['packages'].get(name) or 'none'}"
        for name in RUNTIME_PACKAGES
        if name in known and known[name] != runtime["packages"].get(name)
    ]
    if not cpu:
        print(
            f"envkit's data ({known['source']}): "
            + ("; ".join(drift) + ": the runtime changed" if drift else "the same packages")
        )
    return runtime


# ---------------------------------------------------------------------------- the environment


def lock_packages(lock: Path) -> dict[str, str]:
    """name -> version of every package a requirements lock pins."""
    packages = {}
    for line in Path(lock).read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)", line)
        if match:
            packages[normalise(match.group(1))] = match.group(3)
    return packages


def _stream(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, str]:
    """Run ``argv`` with its output shown as it comes (progress bars included); (exit code, last line).

    It returns when the program ends, as a shell in a terminal does: a child the program left running (a
    ``sleep &``, a TensorBoard server) holds the output pipe open, and would hold the cell until it ended. What
    such a child writes later is still shown, from a thread."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    pipe, tail, after, closed = process.stdout.fileno(), b"", 0, False
    while after < 64 and not closed:  # once the program has ended: what it wrote, not a child's endless output
        after += process.poll() is not None
        if not select.select([pipe], [], [], 0 if after else 0.1)[0]:
            if after:
                break
            continue
        chunk = os.read(pipe, 65536)
        closed = not chunk  # nobody holds the pipe any more
        _show(chunk)
        tail = (tail + chunk)[-4096:]
    code = process.wait()
    if closed:
        process.stdout.close()
    else:
        threading.Thread(target=_show_until_closed, args=(process.stdout,), daemon=True).start()
    lines = [line.strip() for line in re.split(r"[\r\n]+", tail.decode("utf-8", errors="replace")) if line.strip()]
    return code, lines[-1] if lines else "no output"


def _show(chunk: bytes) -> None:
    sys.stdout.write(chunk.decode("utf-8", errors="replace"))
    sys.stdout.flush()


def _show_until_closed(stream) -> None:
    with stream:
        while chunk := os.read(stream.fileno(), 65536):
            _show(chunk)


def _clean_env(prefixes: tuple[str, ...]) -> dict[str, str]:
    # Colab's UV_* settings have broken `uv pip` (colabtools#5237, uv#12724); a platform's PIP_*
    # settings could add an index. The lock names every file by hash: nothing else may decide.
    return {key: value for key, value in os.environ.items() if not key.startswith(prefixes)}


def _installer() -> str:
    chosen = os.environ.get(INSTALLER) or ("uv" if shutil.which("uv") else "pip")
    if chosen not in ("uv", "pip"):
        raise NotebookStop(f"{INSTALLER}={chosen!r}: choose uv or pip")
    return chosen


def create_environment(settings: dict) -> dict:
    """A fresh virtual environment at ./venv holding exactly the lock, installed with hash checking."""
    wheelhouse = cpu_mode()
    if wheelhouse is not None and not wheelhouse.is_dir():  # ENVKIT_NOTEBOOK_CPU=1 reads like a switch
        raise NotebookStop(
            f"{CPU_MODE}={wheelhouse} is not a directory: it names CPU mode's wheelhouse (a CPU "
            f"requirements.lock and its wheels), not a switch; unset it to run on the accelerator"
        )
    lock = Path(settings["lock"]["path"]) if wheelhouse is None else wheelhouse / "requirements.lock"
    if not lock.is_file():
        raise NotebookStop(f"{lock} is missing: run the cells above in order (Run all)")
    python = settings["lock"]["python"] if wheelhouse is None else f"{sys.version_info[0]}.{sys.version_info[1]}"
    offline = ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse else []
    installer = _installer()
    if VENV.exists():
        shutil.rmtree(VENV)
    venv_python = str(VENV / "bin" / "python")
    packages = lock_packages(lock)
    print(
        f"installing {len(packages)} packages of {lock} (sha256 {sha256_of(lock)[:12]}) into {VENV}/ "
        f"with {installer}, hash-checked, on Python {python}"
        + (" (CPU mode: offline, from the wheelhouse)" if wheelhouse else "")
    )
    if installer == "uv":
        env = _clean_env(("UV_",))
        uv_flags = ["--no-config", "--color", "never"] + (["--offline", "--no-python-downloads"] if wheelhouse else [])
        # In CPU mode the wheelhouse was built for this kernel's own interpreter.
        steps = [
            ["uv", "venv", *uv_flags, "--python", sys.executable if wheelhouse else python, str(VENV)],
            [
                "uv",
                "pip",
                "install",
                *uv_flags,
                "--python",
                venv_python,
                "--require-hashes",
                "--no-deps",
                "--only-binary",
                ":all:",
                "-r",
                str(lock),
                *offline,
            ],
        ]
    else:
        runtime_python = f"{sys.version_info[0]}.{sys.version_info[1]}"
        if runtime_python != python:
            raise NotebookStop(
                f"the lock is for Python {python} and this runtime has {runtime_python}: uv provides "
                f"that Python, but uv is not installed here: pip install uv, then run this cell again"
            )
        env = {**_clean_env(("PIP_",)), "PIP_CONFIG_FILE": os.devnull}
        steps = [
            [sys.executable, "-m", "venv", str(VENV)],
            [
                venv_python,
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--require-hashes",
                "--no-deps",
                "--only-binary=:all:",
                "-r",
                str(lock),
                *offline,
            ],
        ]
    for argv in steps:
        code, last = _stream(argv, env)
        if code != 0:
            raise NotebookStop(f"{' '.join(argv[:3])} failed (exit {code}): {last}")
    installed = _venv_distributions(venv_python)
    missing = {name: version for name, version in packages.items() if installed.get(name) != version}
    if missing:
        raise NotebookStop(
            f"{VENV}/ does not hold the lock: {', '.join(f'{n}=={v}' for n, v in sorted(missing.items()))}"
        )
    extra = sorted(set(installed) - set(packages))
    print(
        f"{VENV}/ holds exactly the lock's {len(packages)} packages"
        + (f", plus the installer's {', '.join(extra)}" if extra else "")
    )
    return {
        "python": venv_python,
        "packages": "lock",
        "lock_sha256": sha256_of(lock),
        "installer": _installer_version(installer),
        "lock_differences": None,
    }


def _venv_distributions(python: str) -> dict[str, str]:
    script = (
        "import json, importlib.metadata as m; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    done = subprocess.run([python, "-E", "-s", "-c", script], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NotebookStop(f"{python} does not run: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return {normalise(name): version for name, version in json.loads(done.stdout).items()}


def _installer_version(installer: str) -> str:
    argv = ["uv", "--version"] if installer == "uv" else [sys.executable, "-m", "pip", "--version"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=_clean_env(("UV_",)))
    return " ".join(done.stdout.split()[:2]) or installer


def runtime_environment(settings: dict) -> dict:
    """The runtime's own packages (this kernel's interpreter), and how they differ from the lock."""
    wheelhouse = cpu_mode()
    lock = Path(settings["lock"]["path"]) if wheelhouse is None else wheelhouse / "requirements.lock"
    installed = {normalise(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}
    differences = [
        {"package": name, "lock": version, "runtime": installed.get(name)}
        for name, version in sorted(lock_packages(lock).items())
        if installed.get(name) != version
    ]
    print(
        f"running on this runtime's packages ({sys.executable}), not the lock: "
        f"{len(differences)} of {len(lock_packages(lock))} locked packages differ"
    )
    for entry in differences:
        print(f"  {entry['package']}: lock {entry['lock']}, runtime {entry['runtime'] or 'not installed'}")
    return {
        "python": sys.executable,
        "packages": "runtime",
        "lock_sha256": sha256_of(lock),
        "installer": None,
        "lock_differences": differences,
    }


# ---------------------------------------------------------------------------- the run


def run_program(settings: dict, environment: dict, runtime: dict) -> list[Path]:
    """Each of the experiment's runs of its program from the project's root, in the environment, through the
    run wrapper, with live progress; the results files they wrote."""
    cpu = cpu_mode() is not None
    env = dict(os.environ)
    # Absolute: the program runs from the project's root, which is not the scratch folder for a command.
    python = os.path.abspath(environment["python"])  # not resolved: venv/bin/python is a link out of the venv
    if environment["packages"] == "lock":
        # -E -s: no PYTHONPATH, no user site (Colab and Kaggle set both): only the venv's packages.
        flags = ["-E", "-s", "-u"]
        env["ENVKIT_LOCK_SHA256"] = environment["lock_sha256"]
        # A program that is not `python ...` (a shell script, torchrun) finds the venv's commands first, and the
        # Pythons it starts get what -E -s give.
        for name in ("PYTHONPATH", "PYTHONHOME"):
            env.pop(name, None)
        venv = Path(python).parent.parent
        env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv), PYTHONNOUSERSITE="1")
    else:
        flags = ["-u"]
        env.pop("ENVKIT_LOCK_SHA256", None)
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
        code, last = _stream(argv, env, root)
        if code != 0:
            raise NotebookStop(f"{shown} failed (exit {code}): {last}")
    written = sorted(set(RESULTS.glob("*.json")) - before)
    for path in written:
        record(path, settings, environment, runtime)
    print("results: " + ", ".join(str(path) for path in written))
    return written


def program_argv(program: list[str], python: str, flags: list[str]) -> list[str]:
    """The program's argv, a leading ``python`` (or ``python3``) as the environment's interpreter."""
    head, *rest = program
    return [python, *flags, *rest] if head in ("python", "python3") else list(program)


def record(path: Path, settings: dict, environment: dict, runtime: dict) -> None:
    """Add where the run ran and on which packages to a results file (its optional ``notebook`` block)."""
    document = json.loads(path.read_text(encoding="utf-8"))
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


# ---------------------------------------------------------------------------- the result


def offer(settings: dict, results: list[Path]) -> None:
    """The results files: in the platform's output folder, or offered for download."""
    _deliver(settings, results, "results")


def _deliver(settings: dict, paths: list[Path], what: str, replace: bool = False) -> None:
    """``paths`` in the platform's output folder's results/ (``replace``: under their own names, over an earlier
    copy; else beside earlier copies), or offered for download; one line says where."""
    output = settings["output"]
    folder = os.environ.get(OUTPUT) or (
        output["path"] if output["method"] == "directory" and cpu_mode() is None else None
    )
    if folder:
        target = Path(folder) / "results"
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
        from envkit.errors import EnvkitError  # envkit's own one-line errors, from the embedded copy
        from envkit.runs.formats import render_report
        from envkit.runs.page_adapter import write_report_page
        from envkit.runs.plot import require_matplotlib, write_plot
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

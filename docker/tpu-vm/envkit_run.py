"""envkit's run wrapper: run one command and write its results file, its provenance (issue 25 §6).

    python3 envkit_run.py COMMAND [ARGS...]

Standard library only, and no import of envkit: run.sh, the launch engines and the notebooks
ship this file beside the command (docker/<target>/envkit_run.py, a notebook's cell) and start
the command through it, where envkit is not installed. It reads:

- ENVKIT_RESULTS_DIR (default ``results``): where the results file goes;
- ENVKIT_EXPERIMENT (default: the command's script name): the experiment the run belongs to;
- ENVKIT_LOCK_SHA256, ENVKIT_IMAGE, ENVKIT_IMAGE_ID, ENVKIT_IMAGE_DIGEST, ENVKIT_REVISION: what
  the image (or the notebook, or the venv's marker) says about the environment.

The program reports its metrics the way DVC reads them, with nothing of envkit: a ``metrics.json``
of key/value pairs and per-step series as TSV files under ``plots/metrics/`` (dvclive's layout).
dvclive has no variable for its folder: ``Live()`` writes ``dvclive/`` under the working directory,
so a script that logs with dvclive unchanged is read from there. A script that picks its folder
reads ENVKIT_METRICS_DIR, the run's own folder ``<results>/<run>/``, which this wrapper sets.

A program that writes its own results record (the seed recipes: ``<results>/<recipe>-<run>.json``)
keeps it: the wrapper adds its ``run`` block (experiment, argv, exit status, wall time) to each
record the program wrote, instead of writing a second file. Any other program gets
``<results>/<run>.json``, failed or not, with its exit status, wall time, metrics and environment.
The wrapper exits with the command's status.

What ran is observed, not assumed (issue 32 §3, §4): a site hook on PYTHONPATH reports what torch initialised in
each Python process of the command (the record's device is that, beside the target's label); run in a venv, the
venv's bin/ comes first on PATH; the record's versions, distributions and lock are those of the interpreter that
ran torch (``envkit_run.py --interpreter-facts`` asks another one), and packages other than the lock's are a
warning in the record.
"""

from __future__ import annotations

import csv
import datetime
import hashlib
import itertools
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Its name beside the command: docker/<target>/ and the image's /opt/envkit/, a notebook's folder.
FILE_NAME = "envkit_run.py"
RESULTS_VARIABLE = "ENVKIT_RESULTS_DIR"
DATA_VARIABLE = "ENVKIT_DATA_DIR"
DEVICE_VARIABLE = "ENVKIT_DEVICE"
EXPERIMENT_VARIABLE = "ENVKIT_EXPERIMENT"
METRICS_VARIABLE = "ENVKIT_METRICS_DIR"
# A multi-node engine starts the wrapper on every node; the first node records the run, the others only
# run their part: these say which node this is (run.sh's NODE_RANK, Slurm, SkyPilot, an indexed Kubernetes Job).
NODE_RANK_VARIABLES = ("NODE_RANK", "SLURM_NODEID", "SKYPILOT_NODE_RANK", "JOB_COMPLETION_INDEX")
# What every run's record says, whatever wrote the rest (envkit/data/results.schema.json's "run").
RECORD_VERSION = 1
# dvclive's defaults: Live(dir="dvclive"), metrics_file {dir}/metrics.json, series under {dir}/plots/metrics.
DVCLIVE_DIR = "dvclive"
METRICS_FILE = "metrics.json"
SERIES_DIR = Path("plots", "metrics")
# The venv marker envkit venv writes (envkit/host/venv.py), which names the lock it installed.
VENV_LOCK_MARKER = "envkit-lock.json"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_REVISION = re.compile(r"^[0-9a-f]{7,64}$")
_NAME = re.compile(r"[^A-Za-z0-9._-]+")
PROG = Path(FILE_NAME).stem


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: {PROG}.py COMMAND [ARGS...]  (runs COMMAND and writes its results file)", file=sys.stderr)
        return 2 if not argv else 0
    if any(os.environ.get(name, "0") != "0" for name in NODE_RANK_VARIABLES):
        return run(argv, dict(os.environ))
    results = Path(os.environ.get(RESULTS_VARIABLE) or "results")
    experiment = os.environ.get(EXPERIMENT_VARIABLE) or command_name(argv)
    # noqa below: datetime.UTC needs 3.11, and notebooks may run an older Python.
    started_at = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017
    run_name = unique_name(results, f"{_NAME.sub('-', experiment)}-{started_at:%Y%m%dT%H%M%SZ}")
    folder = results / run_name
    folder.mkdir(parents=True, exist_ok=True)
    records_before = {path: path.stat().st_mtime_ns for path in results.glob("*.json")}
    dvclive_before = _mtime(Path(DVCLIVE_DIR, METRICS_FILE))
    with tempfile.TemporaryDirectory(prefix="envkit-run-") as watch:
        env = watched({**os.environ, METRICS_VARIABLE: str(folder.resolve())}, Path(watch))
        with Logged(folder, env) as streams:
            mark, started = machine_mark(), time.perf_counter()
            status = run(argv, env, **streams)
            wall = round(time.perf_counter() - started, 3)
            busy = machine_facts(mark)
        device = observed_device(Path(watch), os.environ.get(DEVICE_VARIABLE) or None)
    facts = facts_of(device)
    run_block = {
        "record_version": RECORD_VERSION,
        "experiment": experiment,
        "argv": list(argv),
        "exit_status": status,
        "started_at": started_at.isoformat(timespec="seconds"),
        "wall_time_s": wall,
        **busy,
        "device": device,
        "warnings": run_warnings(device, facts),
        **output_facts(folder, results, status),
    }
    written = [
        path
        for path in sorted(results.glob("*.json"))
        if records_before.get(path) != path.stat().st_mtime_ns and _is_record(path)
    ]
    if written:
        for path in written:
            _update(path, {"run": run_block})
        hand_over(*written, *kept(folder))
        return status
    if _mtime(Path(DVCLIVE_DIR, METRICS_FILE)) != dvclive_before:
        collect_dvclive(Path(DVCLIVE_DIR), folder)
    metrics, problem = read_metrics(folder / METRICS_FILE)
    if problem:
        print(f"{PROG}: warning: {problem}", file=sys.stderr)
    metrics = {**output_metrics(folder), **(metrics or {})} or metrics
    record = {
        "schema_version": 3,
        "run_name": run_name,
        "run": run_block,
        "metrics": metrics,
        "series": read_series(folder / SERIES_DIR),
        "environment": truthful_environment(environment(), device, facts),
    }
    _write(results / f"{run_name}.json", record)
    hand_over(results / f"{run_name}.json", *kept(folder))
    return status


def command_name(argv: list[str]) -> str:
    """The experiment a bare run belongs to: its script's name (python train.py: train), else the program's."""
    script = next((word for word in argv[1:] if word.endswith(".py")), None)
    return Path(script or argv[0]).stem or "run"


def unique_name(results: Path, name: str) -> str:
    """``name``, or ``name-2``, ``name-3``... when a run of the same second already took it."""
    candidate, number = name, 1
    while (results / f"{candidate}.json").exists() or (results / candidate).exists():
        number += 1
        candidate = f"{name}-{number}"
    return candidate


def run(argv: list[str], env: dict[str, str], **streams: int) -> int:
    """The command's exit status (a shell's 128+N for a signal, 127 for a command that cannot start); ``streams``:
    where its stdout and stderr go (Popen's), else this process's."""
    try:
        process = subprocess.Popen(argv, env=env, **streams)
    except OSError as exc:
        print(f"{PROG}: error: cannot start {argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    # A container's stop or a scheduler's cancel reaches this process (the image's init hands it here):
    # the command gets it too, and its status is recorded once it ends.
    signal.signal(signal.SIGTERM, lambda number, _frame: process.send_signal(number))
    while True:
        try:
            code = process.wait()
            break
        except KeyboardInterrupt:  # the command got the same Ctrl-C: wait for it to finish
            continue
    return 128 - code if code < 0 else code


def _is_record(path: Path) -> bool:
    """A results record the program wrote itself (an object naming its recipe), not a file of ours."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(document, dict) and "recipe" in document


def collect_dvclive(source: Path, folder: Path) -> None:
    """A dvclive run in the working directory: its metrics and series into the run's folder."""
    if (source / METRICS_FILE).is_file():
        shutil.copyfile(source / METRICS_FILE, folder / METRICS_FILE)
    if (source / SERIES_DIR).is_dir():
        shutil.copytree(source / SERIES_DIR, folder / SERIES_DIR, dirs_exist_ok=True)


def read_metrics(path: Path) -> tuple[dict | None, str | None]:
    """The program's key/value metrics (dvclive's metrics.json; nested keys kept), and what was wrong."""
    if not path.is_file():
        return None, None
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, f"{path} is not JSON ({exc}): no metrics recorded"
    if not isinstance(metrics, dict):
        return None, f"{path} holds a {type(metrics).__name__}, not an object of metrics: no metrics recorded"
    return metrics, None


def read_series(folder: Path) -> dict[str, dict[str, list]]:
    """dvclive's per-step series (plots/metrics/<name>.tsv: step, then the value): name -> steps and values."""
    series = {}
    for path in sorted(folder.rglob("*.tsv")) if folder.is_dir() else ():
        name = path.relative_to(folder).with_suffix("").as_posix()
        steps, values = [], []
        with path.open(encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle, delimiter="\t"):
                value = row.get(Path(name).name)
                try:
                    steps.append(int(row["step"]))
                    values.append(float(value))
                except (KeyError, TypeError, ValueError):
                    continue
        series[name] = {"step": steps, "value": values}
    return series


def environment() -> dict:
    """Where the run ran, found without importing the command's libraries."""
    device = os.environ.get(DEVICE_VARIABLE) or None
    revision, dirty = git_state()
    return {
        "host": socket.gethostname(),
        "device_type": device,
        "device_name": device_name(device),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "torch_xla": _version("torch_xla"),
        "torch_tpu": _version("torch-tpu"),
        "image": os.environ.get("ENVKIT_IMAGE") or None,
        "image_id": os.environ.get("ENVKIT_IMAGE_ID") or None,
        "image_digest": os.environ.get("ENVKIT_IMAGE_DIGEST") or None,
        "lock_sha256": lock_sha256(),
        "git_revision": revision,
        "git_dirty": dirty,
        "distributions": distributions(),
    }


def device_name(device: str | None) -> str | None:
    """The accelerator's name: nvidia-smi's first GPU, the TPU VM's accelerator type, else the CPU's model."""
    if device == "cuda":
        try:
            done = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return (done.stdout.strip().splitlines() or [None])[0] if done.returncode == 0 else None
    if device == "tpu":
        return os.environ.get("TPU_ACCELERATOR_TYPE") or os.environ.get("ACCELERATOR_TYPE") or None
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def lock_sha256() -> str | None:
    """The lock the packages came from: the image's or notebook's ENVKIT_LOCK_SHA256, else the venv's marker."""
    sha = os.environ.get("ENVKIT_LOCK_SHA256", "")
    if not sha:
        try:
            marker = json.loads(Path(sys.prefix, VENV_LOCK_MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        sha = marker.get("lock_sha256", "") if isinstance(marker, dict) else ""
    return sha if isinstance(sha, str) and _SHA256.match(sha) else None


def git_state() -> tuple[str | None, bool | None]:
    """The project's commit and whether its tracked files differ from it (None: not known, e.g. in an image)."""
    revision = os.environ.get("ENVKIT_REVISION", "").strip()
    if revision:
        return (revision if _REVISION.match(revision) else None), None
    head = _git("rev-parse", "HEAD")
    if head is None:
        return None, None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return head, None if status is None else bool(status)


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _version(distribution: str) -> str | None:
    return installed().get(re.sub(r"[-_.]+", "-", distribution).lower())


def distributions() -> list[str]:
    """name==version of every distribution this interpreter has, sorted, with PEP 503 names: the results
    schema's form (as the recipes' harness writes it), which `envkit report` validates."""
    return sorted(f"{name}=={version}" for name, version in installed().items())


_INSTALLED: dict[str, str] = {}


def installed() -> dict[str, str]:
    """PEP 503 name -> version of each distribution this interpreter imports (the first on sys.path wins).

    Read from each METADATA's header alone, by a scan of sys.path: importlib.metadata costs 0.1 s to import
    and parses the whole file (descriptions of 100 KB) with the email parser on every call: 0.75 s after each
    run for 290 distributions, where this takes 0.03 s (benchmarks/bench_wrapper.py)."""
    if not _INSTALLED:
        for entry in sys.path:
            try:
                names = sorted(os.listdir(entry or "."))
            except OSError:  # a zip file, a folder that is gone
                continue
            for name in names:
                if name.endswith((".dist-info", ".egg-info")):
                    _add_distribution(Path(entry or ".", name))
    return _INSTALLED


def _add_distribution(path: Path) -> None:
    for metadata in (path / "METADATA", path / "PKG-INFO", path):
        try:
            with metadata.open(encoding="utf-8", errors="replace") as handle:
                header = "".join(itertools.takewhile(str.strip, itertools.islice(handle, 500)))  # to a blank line
        except OSError:  # not there, or a folder
            continue
        fields = dict(_HEADER.findall(header))
        if fields.get("Name") and fields.get("Version"):
            _INSTALLED.setdefault(re.sub(r"[-_.]+", "-", fields["Name"]).lower(), fields["Version"])
        return


_HEADER = re.compile(r"^(Name|Version):[ \t]*(\S+)[ \t]*$", re.MULTILINE)


def hand_over(*paths: Path) -> None:
    """Root in the image (kinds whose containers run as root) hands what it wrote to the caller,
    ENVKIT_RESULTS_OWNER=uid:gid, as the recipes do (recipes/harness/files.py)."""
    owner = os.environ.get("ENVKIT_RESULTS_OWNER", "")
    if not re.fullmatch(r"[0-9]+:[0-9]+", owner) or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return
    uid, gid = (int(part) for part in owner.split(":"))
    for path in paths:
        os.chown(path, uid, gid, follow_symlinks=False)


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _update(path: Path, fields: dict) -> None:
    document = json.loads(path.read_text(encoding="utf-8"))
    document.update(fields)
    _write(path, document)


def _write(path: Path, document: dict) -> None:
    """Whole or not at all: a reader never sees half a file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(temporary, path)


# The device the run really used (issue 32 §3): not the target's label (ENVKIT_DEVICE) but what torch initialised
# in the run's Python processes. The wrapper puts a sitecustomize on PYTHONPATH (it then runs the interpreter's
# own sitecustomize, if any) that writes, at each process's exit, one report into ENVKIT_DEVICE_REPORTS.
DEVICE_REPORTS_VARIABLE = "ENVKIT_DEVICE_REPORTS"
ACCELERATORS = {"cuda": "cuda", "tpu": "tpu"}  # a label (ENVKIT_DEVICE) that promises an accelerator


def device_hook() -> None:
    """Registers, in a Python process of the run, its report at exit: whether torch initialised CUDA (the devices
    that held memory, their names), the XLA runtime (its device type: TPU, or CPU for XLA:CPU) or TorchTPU.
    Copied alone into the sitecustomize: it uses nothing of this module, and asks nothing that would start
    a runtime the program did not start."""
    import atexit
    import os

    folder = os.environ.get("ENVKIT_DEVICE_REPORTS")

    def report() -> None:
        import json
        import sys

        torch = getattr(sys.modules.get("torch"), "__version__", None)
        seen: dict = {"torch": str(torch) if torch else None, "prefix": sys.prefix, "executable": sys.executable}
        try:
            cuda = getattr(sys.modules.get("torch"), "cuda", None)
            if cuda is not None and cuda.is_initialized():
                used = [i for i in range(cuda.device_count()) if cuda.max_memory_allocated(i) > 0]
                properties = [cuda.get_device_properties(i) for i in used or [cuda.current_device()]]
                seen["cuda"] = [{"name": p.name, "uuid": str(getattr(p, "uuid", ""))} for p in properties]
            xla = sys.modules.get("torch_xla")
            started = getattr(getattr(xla, "_XLAC", None), "_xla_runtime_is_initialized", lambda: False)
            if xla is not None and started():
                seen["xla"] = sys.modules["torch_xla.runtime"].device_type()
            if "torch_tpu" in sys.modules:
                seen["torch_tpu"] = True
        except Exception as exc:  # noqa: BLE001 - a report never changes how the program ends
            seen["error"] = f"{type(exc).__name__}: {exc}"[:300]
        path = os.path.join(folder, f"{os.getpid()}.json")
        try:
            with open(f"{path}.tmp", "w", encoding="utf-8") as handle:
                json.dump(seen, handle)
            os.replace(f"{path}.tmp", path)
        except OSError:
            pass

    if folder:
        atexit.register(report)


_CHAIN = """
def _envkit_chain():
    # The sitecustomize this interpreter has of its own (Debian's, a venv's) runs too.
    import importlib.machinery, os, sys
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.origin and spec.origin.endswith(".py"):
        with open(spec.origin, "rb") as handle:
            exec(compile(handle.read(), spec.origin, "exec"), {"__name__": "sitecustomize", "__file__": spec.origin})


device_hook()
_envkit_chain()
"""


def watched(env: dict[str, str], folder: Path) -> dict[str, str]:
    """``env`` with the device hook on PYTHONPATH (torchrun's workers and every other Python the command starts
    inherit it), writing its reports under ``folder``."""
    import inspect

    (folder / "hook").mkdir()
    (folder / "reports").mkdir()
    (folder / "hook" / "sitecustomize.py").write_text(inspect.getsource(device_hook) + _CHAIN, encoding="utf-8")
    path = os.pathsep.join(filter(None, [str(folder / "hook"), env.get("PYTHONPATH")]))
    # Run in a venv (envkit experiment --python .venv-cuda/bin/python), its bin/ comes first, as activating it
    # does: torchrun and accelerate are the venv's, not another one's on PATH.
    venv = [os.path.dirname(sys.executable)] if sys.prefix != sys.base_prefix else []
    search = os.pathsep.join(dict.fromkeys([*venv, *env.get("PATH", os.defpath).split(os.pathsep)]))
    return {**env, "PATH": search, "PYTHONPATH": path, DEVICE_REPORTS_VARIABLE: str(folder / "reports")}


def observed_device(folder: Path, label: str | None) -> dict:
    """What the run's Python processes initialised: the accelerator (cuda, tpu, else cpu), its name and the
    devices used, beside the target's label; ``observed`` false where no Python process of the run reported
    (a program that is not Python, or one that ignores PYTHONPATH)."""
    reports = []
    for path in sorted((folder / "reports").glob("*.json")):
        try:
            reports.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    reports = [report for report in reports if isinstance(report, dict)]
    cuda = {json.dumps(device, sort_keys=True): device for r in reports for device in r.get("cuda") or ()}
    xla = sorted({r["xla"] for r in reports if isinstance(r.get("xla"), str)})
    accelerator, name, count = "cpu", device_name("cpu"), None
    if cuda:
        devices = list(cuda.values())
        accelerator, name, count = "cuda", devices[0].get("name"), len(devices)
    elif "TPU" in xla or any(r.get("torch_tpu") for r in reports):
        accelerator, name = "tpu", os.environ.get("TPU_ACCELERATOR_TYPE") or os.environ.get("ACCELERATOR_TYPE")
    return {
        "observed": bool(reports),
        "accelerator": accelerator if reports else None,
        "name": name if reports else None,
        "count": count,
        "xla": xla[0] if len(xla) == 1 else (xla or None),
        "label": label,
        "python_processes": len(reports),
        "errors": sorted({r["error"] for r in reports if isinstance(r.get("error"), str)}),
        "interpreter": _other_interpreter(reports),
    }


def _other_interpreter(reports: list[dict]) -> str | None:
    """The interpreter whose processes imported torch (else any of the run's), where it is not the wrapper's own:
    a command that started another venv's Python ran that venv's packages."""
    ran = [r for r in reports if r.get("torch")] or reports
    prefixes = [r.get("prefix") for r in ran if isinstance(r.get("executable"), str)]
    other = max(set(prefixes), key=prefixes.count) if prefixes else sys.prefix
    return next((r["executable"] for r in ran if r.get("prefix") == other), None) if other != sys.prefix else None


def run_warnings(device: dict, facts: dict) -> list[str]:
    """What does not match: a device other than the target's label promised (a GPU run that trained on the CPU),
    another interpreter than the one the run was started with, packages other than the lock's."""
    label, used = device.get("label"), device["accelerator"]
    warnings = []
    if device["observed"] and used != ACCELERATORS.get(label or "", "cpu"):
        warnings.append(f"the target says {label}, but the program initialised {used}: recorded as a {used} run")
    if device.get("interpreter"):
        warnings.append(
            f"the command ran {device['interpreter']}, not {sys.executable} that started it: the record's versions, "
            "distributions and lock are the ones that ran"
        )
    return warnings + facts.get("lock_drift", [])


def interpreter_facts() -> dict:
    """This interpreter's versions, distributions and lock, and how its packages differ from that lock."""
    return {
        "python": platform.python_version(),
        **{field: _version(name) for field, name in (("torch", "torch"), ("torch_xla", "torch_xla"))},
        "torch_tpu": _version("torch-tpu"),
        "lock_sha256": lock_sha256(),
        "distributions": distributions(),
        "lock_drift": lock_drift(),
    }


FACTS_FLAG = "--interpreter-facts"  # envkit_run.py --interpreter-facts: interpreter_facts() as JSON


def facts_of(device: dict) -> dict:
    """interpreter_facts() of the interpreter that ran the command: this one, else asked of the other one."""
    other = device.get("interpreter")
    if not other:
        return interpreter_facts()
    try:
        done = subprocess.run([other, os.path.abspath(__file__), FACTS_FLAG], capture_output=True, timeout=120)
        facts = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {"lock_drift": [f"{other}'s versions could not be read: the record's are {sys.executable}'s"]}
    return facts if isinstance(facts, dict) else {}


def lock_drift() -> list[str]:
    """How the packages here differ from the lock they were installed from (an image's, a venv's marker's)."""
    sha = lock_sha256()
    path = Path(__file__).with_name("requirements.lock") if os.environ.get("ENVKIT_LOCK_SHA256") else None
    try:
        if path is None and sha:
            path = Path(json.loads(Path(sys.prefix, VENV_LOCK_MARKER).read_text(encoding="utf-8"))["lock"])
        text = path.read_bytes() if path else None
    except (OSError, ValueError, KeyError, TypeError):
        text = None
    if not sha or text is None:
        return []
    if hashlib.sha256(text).hexdigest() != sha:
        return [f"{path} is no longer the lock this environment was installed from (sha256 {sha[:12]}): remake it"]
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*\\?$", text.decode("utf-8", "replace"), re.M)
    found = installed()
    drift = [
        f"{name} {found.get(key) or 'missing'} (locked {version})"
        for name, version in pins
        if found.get(key := re.sub(r"[-_.]+", "-", name).lower()) != version
    ]
    more = f" and {len(drift) - 5} more" if len(drift) > 5 else ""
    return [f"the packages that ran differ from the lock {path}: {', '.join(drift[:5])}{more}"] if drift else []


def truthful_environment(environment: dict, device: dict, facts: dict) -> dict:
    """The record's environment with the device the run used, where it was observed, instead of the label, and
    the versions of the interpreter that ran."""
    ran = {key: value for key, value in facts.items() if key in environment}
    if not device["observed"]:
        return {**environment, **ran}
    used = {"device_type": device["accelerator"], "device_name": device["name"], "device_count": device["count"]}
    return {**environment, **ran, **used}


def print_facts() -> int:
    print(json.dumps(interpreter_facts()))
    return 0


# The run's own output (issue 32 §5): its stdout and stderr, shown as they come and kept in its folder; a failed
# run's record carries the end of its stderr; an experiment's metric patterns (envkit.yaml's metrics, checked by
# envkit/project/metric_patterns.py) read metrics from what it printed, as Guild reads an unmodified script.
LOGS = ("stdout", "stderr")
PATTERNS_VARIABLE = "ENVKIT_METRIC_PATTERNS"  # {"key_value": bool, "patterns": {metric: regex with one group}}
STDERR_TAIL_LINES = 20
_KEY_VALUE = re.compile(r"^\s*([A-Za-z_][\w.-]*)\s*:\s*(-?[0-9.]+(?:[eE][-+]?[0-9]+)?%?)\s*$")


class Logged:
    """Pipes for the command's stdout and stderr whose every byte goes to this process's own stream (live) and
    to <run folder>/<stream>.log. A program that leaves a child holding them open is waited for 2 s, no more."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder, self.pipes, self.threads = folder, {}, []
        if sys.stdout.isatty():  # shown live, as on the terminal: Python's stdout into a pipe would wait for 8 KB
            env.setdefault("PYTHONUNBUFFERED", "1")

    def __enter__(self) -> dict[str, int]:
        import threading

        for name in LOGS:
            read, write = os.pipe()
            self.pipes[name] = write
            thread = threading.Thread(target=_copy, args=(read, getattr(sys, name), self.folder / f"{name}.log"))
            thread.daemon = True
            thread.start()
            self.threads.append(thread)
        return dict(self.pipes)

    def __exit__(self, *_exc) -> None:
        for write in self.pipes.values():
            os.close(write)
        for thread in self.threads:
            thread.join(2)


def _copy(read: int, stream, path: Path) -> None:
    """Every chunk to the stream and the log, whichever of them fails: a pipe left unread would stop the program."""
    try:
        log = path.open("wb")
    except OSError:  # a results folder that cannot be written: the output is still shown
        log = open(os.devnull, "wb")  # closed below, with the pipe
    with open(read, "rb", buffering=0) as source, log:
        while chunk := source.read(65536):
            for write in (log.write, stream.buffer.write, lambda _chunk: stream.flush()):
                try:
                    write(chunk)
                except (OSError, ValueError, AttributeError):  # a full disk, a terminal gone: the rest goes on
                    continue


def output_facts(folder: Path, results: Path, status: int) -> dict:
    """The run block's log (its files, from the results folder) and, for a failed run, the end of its stderr."""
    kept = {name: (folder / f"{name}.log") for name in LOGS if _size(folder / f"{name}.log")}
    facts: dict = {"log": {name: path.relative_to(results).as_posix() for name, path in kept.items()}}
    if status != 0 and "stderr" in kept:
        with kept["stderr"].open("rb") as handle:
            handle.seek(max(0, _size(kept["stderr"]) - 16384))
            facts["stderr_tail"] = handle.read().decode("utf-8", "replace").splitlines()[-STDERR_TAIL_LINES:]
    return facts


def output_metrics(folder: Path) -> dict:
    """The metrics the experiment's patterns find in its output (stdout, then stderr): the last value each."""
    try:
        wanted = json.loads(os.environ.get(PATTERNS_VARIABLE) or "{}")
        patterns = {name: re.compile(text) for name, text in wanted.get("patterns", {}).items()}
    except (ValueError, re.error, AttributeError) as exc:
        print(
            f"{PROG}: warning: {PATTERNS_VARIABLE} is not what envkit writes ({exc}): no metrics read", file=sys.stderr
        )
        return {}
    found: dict[str, float] = {}
    for path in (folder / f"{name}.log" for name in LOGS if wanted):
        with open(path, encoding="utf-8", errors="replace") if _size(path) else open(os.devnull) as lines:
            for line in lines:
                pairs = [(name, m.group(1)) for name, pattern in patterns.items() if (m := pattern.search(line))]
                key_value = _KEY_VALUE.match(line) if wanted.get("key_value") else None
                for name, text in pairs + ([key_value.groups()] if key_value else []):
                    try:
                        found[name] = float(text[:-1]) / 100 if text.endswith("%") else float(text)
                    except ValueError:
                        continue
    return found


def kept(folder: Path) -> list[Path]:
    """The run folder and what is in it, once empty logs and an empty folder are gone (none then)."""
    return [folder, *folder.rglob("*")] if drop_if_empty(folder) else []


def drop_if_empty(folder: Path) -> bool:
    """Empty logs and an empty run folder are not left behind; whether the folder stays."""
    for name in LOGS:
        if (folder / f"{name}.log").is_file() and not _size(folder / f"{name}.log"):
            (folder / f"{name}.log").unlink()
    try:
        folder.rmdir()
    except OSError:
        return folder.is_dir()
    return False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def machine_mark() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime, os.getloadavg()[0]


def machine_facts(mark: tuple[float, float]) -> dict:
    """The program's CPU seconds (it and the children it waited for) and the host's 1-minute load average at its
    start and end: beside the wall time they tell a slow program from a busy machine (issue 32 §6: a run's wall
    time on a 2-core host running other jobs was 5x its bare time, at the same CPU time)."""
    cpu, load = machine_mark()
    return {"cpu_time_s": round(cpu - mark[0], 3), "load_average": [round(mark[1], 2), round(load, 2)]}


if __name__ == "__main__":
    sys.exit(print_facts() if sys.argv[1:] == [FACTS_FLAG] else main(sys.argv[1:]))

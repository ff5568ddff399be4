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

Each run has an id, given to the program as ENVKIT_RUN_ID. A program that writes its own results
record (the seed recipes: ``<results>/<recipe>-<run>.json``) names that id in it (``run_id``) and
keeps it: the wrapper adds its ``run`` block (experiment, argv, exit status, wall time) and the
process's facts to each record of its run, instead of writing a second file. Records of other runs
into the same folder are left alone, whenever they were written. Any other program gets
``<results>/<run>.json``, failed or not, with its exit status, wall time, metrics and environment;
the run takes that name, and its folder ``<results>/<run>/``, atomically. The wrapper exits with the
command's status.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

# Its name beside the command: docker/<target>/ and the image's /opt/envkit/, a notebook's folder.
FILE_NAME = "envkit_run.py"
RESULTS_VARIABLE = "ENVKIT_RESULTS_DIR"
DATA_VARIABLE = "ENVKIT_DATA_DIR"
DEVICE_VARIABLE = "ENVKIT_DEVICE"
EXPERIMENT_VARIABLE = "ENVKIT_EXPERIMENT"
METRICS_VARIABLE = "ENVKIT_METRICS_DIR"
RUN_ID_VARIABLE = "ENVKIT_RUN_ID"
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
# The results schema's patterns (tests/support/test_provenance.py holds them equal): a value that is none is null.
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_REVISION = re.compile(r"^[0-9a-f]{7,64}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
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
    started_at = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 - datetime.UTC needs 3.11; notebooks may run older
    run_name, folder = claim(results, f"{_NAME.sub('-', experiment)}-{started_at:%Y%m%dT%H%M%SZ}")
    run_id = uuid.uuid4().hex
    records_before = {path: path.stat().st_mtime_ns for path in results.glob("*.json")}
    dvclive_before = _mtime(Path(DVCLIVE_DIR, METRICS_FILE))
    started = time.perf_counter()
    status = run(argv, {**os.environ, RUN_ID_VARIABLE: run_id, METRICS_VARIABLE: str(folder.resolve())})
    wall = round(time.perf_counter() - started, 3)
    run_block = {
        "record_version": RECORD_VERSION,
        "run_id": run_id,
        "experiment": experiment,
        "argv": list(argv),
        "exit_status": status,
        "started_at": started_at.isoformat(timespec="seconds"),
        "wall_time_s": wall,
    }
    written = [
        path
        for path in sorted(results.glob("*.json"))
        if records_before.get(path) != path.stat().st_mtime_ns and _is_record(path, run_id)
    ]
    if written:
        facts = environment()
        for path in written:
            adopt(path, run_block, facts)
        hand_over(*written)
        shutil.rmtree(folder, ignore_errors=True)  # the recipe's record is the run's: no folder of its own
        return status
    if _mtime(Path(DVCLIVE_DIR, METRICS_FILE)) != dvclive_before:
        collect_dvclive(Path(DVCLIVE_DIR), folder)
    metrics, problem = read_metrics(folder / METRICS_FILE)
    if problem:
        print(f"{PROG}: warning: {problem}", file=sys.stderr)
    record = {
        "schema_version": 3,
        "run_name": run_name,
        "run": run_block,
        "metrics": metrics,
        "series": read_series(folder / SERIES_DIR),
        "environment": environment(),
    }
    _write_new(results / f"{run_name}.json", record)
    hand_over(results / f"{run_name}.json", folder, *folder.rglob("*"))
    return status


def command_name(argv: list[str]) -> str:
    """The experiment a bare run belongs to: its script's name (python train.py: train), else the program's."""
    script = next((word for word in argv[1:] if word.endswith(".py")), None)
    return Path(script or argv[0]).stem or "run"


def claim(results: Path, name: str) -> tuple[str, Path]:
    """The run's name and folder: ``name``, or ``name-2``, ``name-3``... when another run (of the same second,
    maybe at this moment) took it. Taken by making the folder, which only one process can do; a name whose
    record is there without its folder (a recipe's run removes it) is an earlier run's too."""
    results.mkdir(parents=True, exist_ok=True)
    for number in range(1, 10_000):
        candidate = name if number == 1 else f"{name}-{number}"
        try:
            (results / candidate).mkdir()
        except FileExistsError:
            continue
        if not os.path.lexists(results / f"{candidate}.json"):
            return candidate, results / candidate
        (results / candidate).rmdir()
    raise FileExistsError(f"no free run name {name}-N in {results}")


def run(argv: list[str], env: dict[str, str]) -> int:
    """The command's exit status (a shell's 128+N for a signal, 127 for a command that cannot start)."""
    try:
        process = subprocess.Popen(argv, env=env)
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


def _is_record(path: Path, run_id: str) -> bool:
    """A results record this run's program wrote itself (an object naming its recipe and this run), not
    another run's (two runs may share a results folder) nor a file of ours."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(document, dict) and "recipe" in document and document.get("run_id") == run_id


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
        "image_digest": _matching(_DIGEST, os.environ.get("ENVKIT_IMAGE_DIGEST", "")),
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
    return _matching(_SHA256, sha)


def _matching(pattern: re.Pattern, value: object) -> str | None:
    return value if isinstance(value, str) and pattern.match(value) else None


def git_state() -> tuple[str | None, bool | None]:
    """The project's commit and whether its tracked files differ from it (None: not known, e.g. in an image)."""
    revision = os.environ.get("ENVKIT_REVISION", "").strip()
    if revision:
        return _matching(_REVISION, revision), None
    head = _matching(_REVISION, _git("rev-parse", "HEAD"))
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
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def distributions() -> list[str]:
    """name==version of every distribution this interpreter has, sorted, with PEP 503 names: the results
    schema's form (as the recipes' harness writes it), which `envkit report` validates."""
    from importlib import metadata

    found = {
        f"{re.sub(r'[-_.]+', '-', dist.metadata['Name']).lower()}=={dist.version}"
        for dist in metadata.distributions()
        if dist.metadata["Name"]
    }
    return sorted(found)


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


def adopt(path: Path, run_block: dict, facts: dict) -> None:
    """A record the program wrote gains the run block and the process's facts: the program's own
    environment keys (a recipe's: the device torch initialised, torch's build) are kept over this
    wrapper's, which cannot know them."""
    document = json.loads(path.read_text(encoding="utf-8"))
    own = document.get("environment")
    document.update(run=run_block, environment={**facts, **(own if isinstance(own, dict) else {})})
    _write(path, document)


def _write(path: Path, document: dict, replace=os.replace) -> None:
    """Whole or not at all: a reader never sees half a file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    try:
        replace(temporary, path)
    finally:
        if replace is os.link:
            temporary.unlink()


def _write_new(path: Path, document: dict) -> None:
    """Whole, and never over another file: linked into place, which fails where a file is (FileExistsError)."""
    _write(path, document, os.link)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

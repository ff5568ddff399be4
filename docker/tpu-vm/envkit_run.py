"""envkit's run wrapper: run one command and write its results file, its provenance (issue 25 §6).

    python3 envkit_run.py COMMAND [ARGS...]

Standard library only, and no import of envkit: run.sh, the launch engines and the notebooks ship this file
beside the command (docker/<target>/envkit_run.py, a notebook's cell) and start the command through it, where
envkit is not installed. It reads ENVKIT_RESULTS_DIR (default ``results``), ENVKIT_EXPERIMENT (default: the
script's name), and what the image, the notebook or the venv's marker says about the environment
(ENVKIT_LOCK_SHA256, ENVKIT_IMAGE, ENVKIT_IMAGE_ID, ENVKIT_IMAGE_DIGEST, ENVKIT_REVISION).

The program reports its metrics the way DVC reads them, with nothing of envkit: a ``metrics.json`` of key/value
pairs and per-step series as TSV files under ``plots/metrics/`` (dvclive's layout), in ENVKIT_METRICS_DIR (the
run's own folder ``<results>/<run>/``) or in ``dvclive/`` under the working directory, where ``Live()`` writes.

Each run has an id, given to the program as ENVKIT_RUN_ID. A program that writes its own results record (the
seed recipes: ``<results>/<recipe>-<run>.json``) names it there (``run_id``) and keeps it: the wrapper adds its
``run`` block (experiment, argv, exit status, wall time) and the process's facts to each record of its run; other
runs' records in the folder are left alone. Any other program gets ``<results>/<run>.json``, failed or not, a name
the run takes atomically. Every file is read with bounds, and what could not be read is named in the record
(``run.unread``); the wrapper forwards the signals that stop a run and exits with the command's status.
"""

from __future__ import annotations

import csv
import datetime
import errno
import io
import json
import os
import platform
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

# Its name beside the command: docker/<target>/ and the image's /opt/envkit/, a notebook's folder.
FILE_NAME = "envkit_run.py"
RESULTS_VARIABLE = "ENVKIT_RESULTS_DIR"
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
# What it reads of the program's files, as envkit's reader caps them (bounded_load's MAX_BYTES and MAX_DEPTH;
# tests/support/test_provenance.py holds them equal): a record past either is one the report refuses.
MAX_READ = 16 * 2**20
MAX_DEPTH = 64
MAX_POINTS = 200_000  # a series' point is about 40 bytes of the record: all of them stay well under MAX_READ
# A run's stop, cancel, preemption or hang-up: the command gets them (else this process alone would end, unrecorded).
FORWARDED = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: {PROG}.py COMMAND [ARGS...]  (runs COMMAND and writes its results file)", file=sys.stderr)
        return 2 if not argv else 0
    if any(os.environ.get(name, "0") != "0" for name in NODE_RANK_VARIABLES):
        return run(argv, dict(os.environ))
    results = Path(os.environ.get(RESULTS_VARIABLE) or "results")
    experiment = os.environ.get(EXPERIMENT_VARIABLE) or command_name(argv)
    started_at = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 - datetime.UTC needs 3.11; notebooks may run older
    run_id = uuid.uuid4().hex
    env = {**os.environ, RUN_ID_VARIABLE: run_id}
    try:
        run_name, folder = claim(results, f"{_NAME.sub('-', experiment)}-{started_at:%Y%m%dT%H%M%SZ}")
    except OSError as exc:
        # It runs all the same (what it prints or saves elsewhere outweighs a record); this line says so at once.
        _warn(f"cannot write results into {results} ({_reason(exc)}): {argv[0]} runs, and no results file is written")
        return run(argv, env)
    before = _stamps(results)
    dvclive_before = _stamp(Path(DVCLIVE_DIR, METRICS_FILE))
    started = time.perf_counter()
    status = run(argv, {**env, METRICS_VARIABLE: str(folder.resolve())})
    run_block = {
        "record_version": RECORD_VERSION,
        "run_id": run_id,
        "experiment": experiment,
        "argv": list(argv),
        "exit_status": status,
        "started_at": started_at.isoformat(timespec="seconds"),
        "wall_time_s": round(time.perf_counter() - started, 3),
        "unread": [],
    }
    try:
        source = Path(DVCLIVE_DIR) if _stamp(Path(DVCLIVE_DIR, METRICS_FILE)) != dvclive_before else folder
        record_run(results, run_name, run_block, changed=_changed(results, before), source=source)
    except Exception as exc:  # noqa: BLE001 - whatever the record met, the command's status is what is returned
        _warn(f"the run's results file was not written: {_reason(exc)}")
    return status


def record_run(results: Path, run_name: str, run_block: dict, changed: list[Path], source: Path) -> None:
    """Complete the records this run's program wrote, else write its own from ``source`` (its folder, or dvclive's)."""
    folder, unread = results / run_name, run_block["unread"]
    own = own_records(changed, run_block["run_id"], unread)
    if own:
        facts = environment()
        for path, document in own:
            adopt(path, document, run_block, facts)
        hand_over(*(path for path, _ in own))
        shutil.rmtree(folder, ignore_errors=True)  # the recipe's record is the run's: no folder of its own
        return
    record = {
        "schema_version": 3,
        "run_name": run_name,
        "run": run_block,
        "metrics": read_metrics(source / METRICS_FILE, unread),
        "series": read_series(source / SERIES_DIR, unread),
        "environment": environment(),
    }
    _write_new(results / f"{run_name}.json", _within_limit(record, unread))
    hand_over(results / f"{run_name}.json", folder, *folder.rglob("*"))


def command_name(argv: list[str]) -> str:
    """The experiment a bare run belongs to: its script's name (python train.py: train), else the program's."""
    script = next((word for word in argv[1:] if word.endswith(".py")), None)
    return Path(script or argv[0]).stem or "run"


def claim(results: Path, name: str) -> tuple[str, Path]:
    """The run's name and folder: ``name``, or ``name-2``, ``name-3``... where another run (of the same second, maybe
    now) took it. Taken by making the folder, which one process alone can do; a record without its folder too."""
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
    """The command's exit status (a shell's 128+N for a signal, 127 for a command that cannot start). Each
    signal in FORWARDED goes on to the command, whose status is then recorded; Ctrl-C and Ctrl-\\ from the
    terminal reach it by themselves (the terminal's whole foreground group gets them)."""
    process: list[subprocess.Popen] = []
    pending: list[int] = []

    def forward(number: int, _frame: object) -> None:
        if not process:
            pending.append(number)  # before the command started: it gets the signal once it has
        elif not _from_keyboard(number):
            process[0].send_signal(number)

    for number in FORWARDED:
        signal.signal(number, forward)
    try:
        process.append(subprocess.Popen(argv, env=env))
    except OSError as exc:
        print(f"{PROG}: error: cannot start {argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    for number in pending:
        process[0].send_signal(number)
    code = process[0].wait()  # a signal's handler runs, and the wait goes on (PEP 475)
    return 128 - code if code < 0 else code


def _from_keyboard(number: int) -> bool:
    """Whether a SIGINT or SIGQUIT came from this process's terminal: it is in the terminal's foreground group."""
    if number not in (signal.SIGINT, signal.SIGQUIT):
        return False
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (AttributeError, OSError, ValueError):  # no stdin, or not a terminal
        return False


# ---------------------------------------------------------------- what the program left, read with bounds
class Unreadable(ValueError):
    """A file the wrapper will not read, or could not: the reason, in one line."""


def read_regular(path: Path, limit: int = MAX_READ) -> bytes:
    """A regular file's bytes, at most ``limit``, as envkit's reader (bounded_load.py) reads: a symlink is not followed
    (it may lead to a credentials file), a FIFO not waited on, and the size is known first (/dev/zero never ends)."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise Unreadable("a symbolic link, not followed" if exc.errno == errno.ELOOP else _reason(exc)) from None
    try:
        info, data = os.fstat(handle), b""
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable(f"{_kind(info.st_mode)}, not a regular file")
        while info.st_size <= limit and len(data) <= limit and (chunk := os.read(handle, limit + 1 - len(data))):
            data += chunk
    finally:
        os.close(handle)
    if info.st_size > limit or len(data) > limit:
        raise Unreadable(f"larger than {limit // 2**20} MiB, more than the wrapper reads")
    return data


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"))
    return next((name for test, name in kinds if test(mode)), "a special file")


def parse_json(data: bytes, depth: int = MAX_DEPTH) -> object:
    """A JSON document nested at most ``depth`` deep (the report refuses a record nested deeper than MAX_DEPTH)."""
    too_deep = Unreadable(f"nested deeper than {depth} levels, more than a results file may be")
    try:
        document = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise Unreadable(f"not UTF-8 (byte {exc.start})") from None
    except RecursionError:
        raise too_deep from None
    except ValueError as exc:
        raise Unreadable(f"not JSON ({' '.join(str(exc).split())})") from None
    pending = [(document, 1)]
    while pending:  # iterative: a recursive walk is what a deep document would break
        value, level = pending.pop()
        if isinstance(value, (dict, list)):
            if level > depth:
                raise too_deep
            pending.extend((child, level + 1) for child in (value.values() if isinstance(value, dict) else value))
    return document


def _stamps(results: Path) -> dict[str, tuple[int, int, int] | None]:  # each *.json entry as it stands, not followed
    try:
        with os.scandir(results) as entries:
            return {entry.name: _stamp(entry.path) for entry in entries if entry.name.endswith(".json")}
    except OSError:
        return {}


def _changed(results: Path, before: dict) -> list[Path]:
    return [results / name for name, stamp in sorted(_stamps(results).items()) if before.get(name) != stamp]


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino


def own_records(changed: list[Path], run_id: str, unread: list[str]) -> list[tuple[Path, dict]]:
    """The results records this run's program wrote (objects naming their recipe and this run), not another run's
    (two runs may share a results folder) nor a file of ours; a changed file that could not be read is unread."""
    own = []
    for path in changed:
        try:
            document = parse_json(read_regular(path))
        except Unreadable as exc:
            _unread(unread, path, str(exc))
            continue
        if isinstance(document, dict) and "recipe" in document and document.get("run_id") == run_id:
            own.append((path, document))
    return own


def read_metrics(path: Path, unread: list[str]) -> dict | None:
    """The program's key/value metrics (dvclive's metrics.json; nested keys kept), or None."""
    if not os.path.lexists(path):
        return None
    try:
        metrics = parse_json(read_regular(path), MAX_DEPTH - 1)  # one level down in the record
    except Unreadable as exc:
        return _unread(unread, path, str(exc))
    if not isinstance(metrics, dict):
        return _unread(unread, path, f"holds a {type(metrics).__name__}, not an object of metrics")
    return metrics


def read_series(folder: Path, unread: list[str]) -> dict[str, dict[str, list]]:
    """dvclive's per-step series (plots/metrics/<name>.tsv: step, then the value): name -> steps and values."""
    series, points = {}, 0
    for path in _tsv_files(folder):
        name = path.relative_to(folder).with_suffix("").as_posix()
        try:
            steps, values = _parse_series(read_regular(path), Path(name).name)
        except Unreadable as exc:
            _unread(unread, path, str(exc))
            continue
        points += len(steps)
        if points > MAX_POINTS:
            _unread(unread, path, f"past {MAX_POINTS} points in the run's series")
            continue
        series[name] = {"step": steps, "value": values}
    return series


def _tsv_files(folder: Path) -> list[Path]:
    """Every ``*.tsv`` file under ``folder``; linked folders are not entered."""
    found = []
    for directory, _folders, files in os.walk(folder):
        found += [Path(directory, name) for name in files if name.endswith(".tsv")]
    return sorted(found)


def _parse_series(data: bytes, column: str) -> tuple[list[int], list[float]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"not UTF-8 (byte {exc.start})") from None
    steps, values = [], []
    try:
        for row in csv.DictReader(io.StringIO(text, newline=""), delimiter="\t"):
            try:
                step, value = int(row["step"]), float(row.get(column))
            except (KeyError, TypeError, ValueError):
                continue
            steps.append(step)
            values.append(value)
    except csv.Error as exc:
        raise Unreadable(f"not TSV ({exc})") from None
    return steps, values


def _unread(unread: list[str], path: Path, why: str) -> None:
    unread.append(f"{path}: {why}")
    _warn(f"{path}: {why}: not recorded")


def _within_limit(record: dict, unread: list[str]) -> bytes:
    """The record as written, no larger than the report reads: the series, then the metrics give way."""
    data = _serialised(record)
    for key, nothing in (("series", {}), ("metrics", None)):
        if len(data) <= MAX_READ:
            break
        record[key] = nothing
        _unread(unread, Path(record["run_name"]), f"its {key} take the record past {MAX_READ // 2**20} MiB")
        data = _serialised(record)
    return data


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
        return ((_output("nvidia-smi", "--query-gpu=name", "--format=csv,noheader") or "").splitlines() or [None])[0]
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
            marker = parse_json(read_regular(Path(sys.prefix, VENV_LOCK_MARKER)))
        except (OSError, Unreadable):
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
    head = _matching(_REVISION, _output("git", "rev-parse", "HEAD"))
    if head is None:
        return None, None
    status = _output("git", "status", "--porcelain", "--untracked-files=no")
    return head, None if status is None else bool(status)


def _output(*argv: str) -> str | None:
    """A tool's output, stripped; None where it is missing, fails or takes more than 30 s."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
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
    """Root in the image hands what it wrote to ENVKIT_RESULTS_OWNER=uid:gid (recipes/harness/files.py does too)."""
    owner = os.environ.get("ENVKIT_RESULTS_OWNER", "")
    if not re.fullmatch(r"[0-9]+:[0-9]+", owner) or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return
    uid, gid = (int(part) for part in owner.split(":"))
    for path in paths:
        os.chown(path, uid, gid, follow_symlinks=False)


def adopt(path: Path, document: dict, run_block: dict, facts: dict) -> None:
    """A record the program wrote gains the run block and the process's facts; the program's own environment keys
    (a recipe's: the device torch initialised, torch's build) are kept over this wrapper's, which cannot know them."""
    own = document.get("environment")
    document.update(run=run_block, environment={**facts, **(own if isinstance(own, dict) else {})})
    _write(path, _serialised(document))


def _serialised(document: dict) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _write(path: Path, data: bytes, replace=os.replace) -> None:
    """Whole or not at all: a reader never sees half a file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    try:
        replace(temporary, path)
    finally:
        if replace is os.link:
            temporary.unlink()


def _write_new(path: Path, data: bytes) -> None:
    """Whole, and never over another file: linked into place, which fails where a file is (FileExistsError)."""
    _write(path, data, os.link)


def _warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def _reason(error: BaseException) -> str:
    return (error.strerror if isinstance(error, OSError) else None) or str(error) or type(error).__name__


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

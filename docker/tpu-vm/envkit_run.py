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

What ran is observed, not assumed (issue 32 §3, §4): a site hook on PYTHONPATH reports what torch initialised in
each Python process of the command (the record's device is that, beside the target's label); run in a venv, the
venv's bin/ comes first on PATH; the record's versions, distributions and lock are those of the interpreter that
ran torch (``envkit_run.py --interpreter-facts`` asks another one), and packages other than the lock's are a
warning in the record. The command's stdout and stderr are shown and kept in its run folder (issue 32 §5).
"""

from __future__ import annotations

import csv
import datetime
import errno
import hashlib
import io
import itertools
import json
import os
import platform
import re
import resource
import signal
import socket
import stat
import subprocess
import sys
import tempfile
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
    with tempfile.TemporaryDirectory(prefix="envkit-run-") as watch:
        env = watched({**env, METRICS_VARIABLE: str(folder.resolve())}, Path(watch))
        with Logged(folder, env) as streams:
            mark, started = machine_mark(), time.perf_counter()
            status = run(argv, env, **streams)
            wall = round(time.perf_counter() - started, 3)
            busy = machine_facts(mark)
        device = observed_device(Path(watch), os.environ.get(DEVICE_VARIABLE) or None)
    run_block = {
        "record_version": RECORD_VERSION,
        "run_id": run_id,
        "experiment": experiment,
        "argv": list(argv),
        "exit_status": status,
        "started_at": started_at.isoformat(timespec="seconds"),
        "wall_time_s": wall,
        **busy,
        "device": device,
        "unread": [],
    }
    try:
        facts = facts_of(device)
        run_block.update(warnings=run_warnings(device, facts), **output_facts(folder, results, status))
        source = Path(DVCLIVE_DIR) if _stamp(Path(DVCLIVE_DIR, METRICS_FILE)) != dvclive_before else folder
        own = own_records(_changed(results, before), run_id, run_block["unread"])
        record_run(results, run_name, run_block, own, truthful_environment(environment(), device, facts), source)
    except Exception as exc:  # noqa: BLE001 - whatever the record met, the command's status is what is returned
        _warn(f"the run's results file was not written: {_reason(exc)}")
    return status


def record_run(
    results: Path, run_name: str, run_block: dict, own: list[tuple[Path, dict]], facts: dict, source: Path
) -> None:
    """Complete the records this run's program wrote (``own``) with the run block and ``facts``, else write its
    own, with the metrics and series of ``source`` (its folder, or dvclive's) and those its output printed."""
    folder, unread = results / run_name, run_block["unread"]
    if own:
        for path, document in own:
            adopt(path, document, run_block, facts)
        hand_over(*(path for path, _ in own), *kept(folder))  # the recipe's record is the run's; its logs stay
        return
    metrics = read_metrics(source / METRICS_FILE, unread)
    record = {
        "schema_version": 3,
        "run_name": run_name,
        "run": run_block,
        "metrics": {**output_metrics(folder), **(metrics or {})} or metrics,
        "series": read_series(source / SERIES_DIR, unread),
        "environment": facts,
    }
    _write_new(results / f"{run_name}.json", _within_limit(record, unread))
    hand_over(results / f"{run_name}.json", *kept(folder))


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


def run(argv: list[str], env: dict[str, str], **streams: int) -> int:
    """The command's exit status (a shell's 128+N for a signal, 127 for a command that cannot start); ``streams``:
    where its stdout and stderr go (Popen's), else this process's. Each signal in FORWARDED goes on to the command,
    whose status is then recorded; Ctrl-C and Ctrl-\\ from the terminal reach it by themselves (the terminal's
    whole foreground group gets them)."""
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
        process.append(subprocess.Popen(argv, env=env, **streams))
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
            path = Path(parse_json(read_regular(Path(sys.prefix, VENV_LOCK_MARKER)))["lock"])
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

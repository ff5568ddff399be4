"""envkit's run wrapper: what the program left, read with bounds, and the records written whole (issue 33 §7-§8).

One of the files that ship together as envkit_run.py (provenance.py's SHIPPED): standard library only. Every read is
of a regular file, never followed through a symbolic link nor waited on (a FIFO), and at most what envkit's own
reader reads (envkit/support/bounded_load.py); what could not be read is named, never a traceback.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import stat
import sys
from pathlib import Path

# The wrapper's name beside the command: docker/<target>/ and the image's /opt/envkit/, a notebook's folder.
FILE_NAME = "envkit_run.py"
PROG = Path(FILE_NAME).stem  # how its lines begin
# Set by whatever starts the run as a target's (envkit experiment, run.sh, the launch engines, the notebooks): two
# targets of one kind on one host are two rows of the report, not one "cpu on host" (issue 32 §2). Here, with the
# next one, so that envkit's plans name them without importing the rest of the wrapper (issue 42).
TARGET_VARIABLE = "ENVKIT_TARGET"
# The device the run's target promises, where the program is told another: a CPU stand-in of a GPU target
# (--allow-cpu) runs with ENVKIT_DEVICE=cpu, and its record's label stays the target's (the report's "CPU run").
TARGET_DEVICE_VARIABLE = "ENVKIT_TARGET_DEVICE"
# Set by envkit experiment where it hands its last run over to the wrapper (os.execvpe): the run's title, so that the
# wrapper says how the run ended as envkit would have (ended), and the program is not told it.
TITLE_VARIABLE = "ENVKIT_RUN_TITLE"
# Where results go without ENVKIT_RESULTS_DIR: the one home of the name (envkit, its templates, make, the notebooks).
RESULTS_FOLDER = "results"
# Its modules, shipped beside it under their own names (a name of envkit's: no project's module is shadowed).
MODULES = ("provenance_records", "provenance_facts", "provenance_device", "provenance_output", "provenance_files")
# What it reads of the program's files, as envkit's reader caps them (bounded_load's MAX_BYTES and MAX_DEPTH;
# tests/support/test_provenance_hostile.py holds them equal): a record past either is one the report refuses.
MAX_READ = 16 * 2**20
MAX_DEPTH = 64
MAX_POINTS = 200_000  # a series' point is about 40 bytes of the record: all of them stay well under MAX_READ


class Unreadable(ValueError):
    """A file the wrapper will not read, or could not: the reason, in one line."""


def read_regular(path: Path, limit: int = MAX_READ) -> bytes:
    """A regular file's bytes, at most ``limit``, as envkit's reader (bounded_load.py) reads: a symlink is not followed
    (it may lead to a credentials file), a FIFO not waited on, and the size is known first (/dev/zero never ends)."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise Unreadable("a symbolic link, not followed" if exc.errno == errno.ELOOP else reason(exc)) from None
    try:
        info, data = os.fstat(handle), b""
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable(f"{file_kind(info.st_mode)}, not a regular file")
        while info.st_size <= limit and len(data) <= limit and (chunk := os.read(handle, limit + 1 - len(data))):
            data += chunk
    finally:
        os.close(handle)
    if info.st_size > limit or len(data) > limit:
        raise Unreadable(f"larger than {limit // 2**20} MiB, more than the wrapper reads")
    return data


def file_kind(mode: int) -> str:
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


def stamps(results: Path) -> dict[str, tuple[int, int, int] | None]:  # each *.json entry as it stands, not followed
    try:
        with os.scandir(results) as entries:
            return {entry.name: stamp(entry.path) for entry in entries if entry.name.endswith(".json")}
    except OSError:
        return {}


def changed(results: Path, before: dict) -> list[Path]:
    return [results / name for name, stamp in sorted(stamps(results).items()) if before.get(name) != stamp]


def stamp(path: Path) -> tuple[int, int, int] | None:
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
    if linked := _linked(path.parent, 0):
        return _unread(unread, linked, "a symbolic link, not followed")
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
    if linked := _linked(folder, 2):  # plots/metrics -> / was walked whole (issue 39 §11)
        _unread(unread, linked, "a symbolic link, not followed")
        return series
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
    """Every ``*.tsv`` file under ``folder``; linked folders are not entered (nor read: read_regular)."""
    found = []
    for directory, _folders, files in os.walk(folder, followlinks=False):
        found += [Path(directory, name) for name in files if name.endswith(".tsv")]
    return sorted(found)


def _linked(path: Path, levels: int) -> Path | None:
    """The first of ``path`` and its ``levels`` parents (the metrics folder, ./dvclive) that is a symbolic link."""
    return next((each for each in [path, *list(path.parents)[:levels]] if os.path.islink(each)), None)


def _parse_series(data: bytes, column: str) -> tuple[list[int], list[float]]:
    # Here, not at the top: only a run that writes a metric's series has one read, while envkit.project.output's
    # RESULTS_FOLDER brought csv into every render (issue 42).
    import csv

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
    warn(f"{path}: {why}: not recorded")


def within_limit(record: dict, unread: list[str]) -> bytes:
    """The record as written, no larger than the report reads: the series, then the metrics give way."""
    data = serialised(record)
    for key, nothing in (("series", {}), ("metrics", None)):
        if len(data) <= MAX_READ:
            break
        record[key] = nothing
        _unread(unread, Path(record["run_name"]), f"its {key} take the record past {MAX_READ // 2**20} MiB")
        data = serialised(record)
    return data


def hand_over(*paths: Path) -> None:
    """Root in the image hands what it wrote to ENVKIT_RESULTS_OWNER=uid:gid (recipes/harness/files.py does too)."""
    owner = os.environ.get("ENVKIT_RESULTS_OWNER", "")
    if not re.fullmatch(r"[0-9]+:[0-9]+", owner) or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return
    uid, gid = (int(part) for part in owner.split(":"))
    for path in paths:
        os.chown(path, uid, gid, follow_symlinks=False)


def adopt(path: Path, document: dict, run_block: dict, facts: dict) -> None:
    """A record the program wrote gains the run block and the process's facts, of which this wrapper is the one owner
    (torch's versions, the CPU's model: a recipe's harness leaves them to it). The program's own keys are kept: a
    recipe's devices, as torch named and counted what it initialised (XLA:CPU ×8, which this wrapper's observation
    calls a CPU), torchvision and torch's CUDA build."""
    own = document.get("environment")
    document.update(run=run_block, environment={**facts, **(own if isinstance(own, dict) else {})})
    replace(path, serialised(document))


def serialised(document: dict) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")


def replace(path: Path, data: bytes, put=os.replace) -> None:
    """Whole or not at all: a reader never sees half a file, and none is left behind (a full disk, issue 39 §8)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_bytes(data)
        put(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)  # linked into place (write_new), or not written whole


def write_new(path: Path, data: bytes) -> None:
    """Whole, and never over another file: linked into place, which fails where a file is (FileExistsError)."""
    replace(path, data, os.link)


def ended(title: str, status: int, seconds: float) -> str:
    """envkit's line at the end of a run it started: the wrapper prints it where envkit handed the run over."""
    return f"envkit: {title}: exit {status} after {seconds:.1f} s"


def warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def reason(error: BaseException) -> str:
    return (error.strerror if isinstance(error, OSError) else None) or str(error) or type(error).__name__


def shipped() -> dict[str, Path]:
    """The wrapper's files by their names where they ship (docker/<target>/, /opt/envkit/, a notebook's folder).

    Here, not in provenance.py: render asks it, and importing the whole wrapper cost every render (issue 42)."""
    here = Path(__file__).parent
    return {FILE_NAME: here / "provenance.py", **{f"{module}.py": here / f"{module}.py" for module in MODULES}}

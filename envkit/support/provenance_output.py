"""envkit's run wrapper: the run's own output and the machine's load (issue 32 §5, §6).

One of the files that ship together as envkit_run.py (provenance.py's SHIPPED): standard library only. The command's
stdout and stderr are shown as they come and kept in its run folder, as they come and bounded (issue 39 §9); a failed
run's record carries the end of its stderr; an experiment's metric patterns (envkit.yaml's metrics, checked by
envkit/project/metric_patterns.py) read metrics from what it printed, line by line, as Guild reads an unmodified
script.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import sys
import time
from pathlib import Path

try:  # in envkit: modules of envkit.support
    from . import provenance_records as records
except ImportError:  # shipped: beside envkit_run.py, which put its folder on sys.path
    import provenance_records as records

LOGS = ("stdout", "stderr")
PATTERNS_VARIABLE = "ENVKIT_METRIC_PATTERNS"  # {"key_value": bool, "patterns": {metric: regex with one group}}
# What a stream's log keeps (issue 39 §9: 1 GiB of output was a 1 GiB log): its first half as the program printed
# it, then its last half, with the count of bytes cut between them.
LOG_BYTES_VARIABLE = "ENVKIT_LOG_BYTES"
LOG_BYTES = 16 * 2**20
LONGEST_LINE = 65536  # a longer line is matched by its first 64 KiB: the patterns' memory is bounded
TAIL_EVERY_S = 1.0  # the kept tail reaches the log at most this late (a killed wrapper loses no more)
STDERR_TAIL_LINES = 20
_KEY_VALUE = r"^\s*([A-Za-z_][\w.-]*)\s*:\s*(-?[0-9.]+(?:[eE][-+]?[0-9]+)?%?)\s*$"


class Matcher:
    """An experiment's metric patterns (envkit.yaml's metrics, in ENVKIT_METRIC_PATTERNS) matched against the
    output line by line as it comes, never more than LONGEST_LINE bytes of it held: the last value of each."""

    def __init__(self, wanted: dict, patterns: dict) -> None:
        self.wanted, self.patterns, self.found = wanted, patterns, {}
        # compiled where it is wanted: a program with no metrics compiles no pattern
        self.key_value = re.compile(_KEY_VALUE) if wanted.get("key_value") else None
        self.line, self.longer = b"", False

    @classmethod
    def from_environment(cls) -> Matcher:
        try:
            wanted = json.loads(os.environ.get(PATTERNS_VARIABLE) or "{}")
            patterns = {name: re.compile(text) for name, text in wanted.get("patterns", {}).items()}
        except (ValueError, re.error, AttributeError) as exc:
            records.warn(f"{PATTERNS_VARIABLE} is not what envkit writes ({exc}): no metrics read")
            wanted, patterns = {}, {}
        return cls(wanted, patterns)

    def twin(self) -> Matcher:  # the same patterns, for another stream
        return Matcher(self.wanted, self.patterns)

    def feed(self, chunk: bytes) -> None:
        if not self.wanted:
            return
        *lines, rest = chunk.split(b"\n")
        for line in lines:
            self._match(self.line + line if not self.longer else self.line)
            self.line, self.longer = b"", False
        if not self.longer:
            self.line += rest
            self.longer = len(self.line) > LONGEST_LINE
            self.line = self.line[:LONGEST_LINE]

    def close(self) -> dict[str, float]:
        if self.line:
            self._match(self.line)
        self.line = b""
        return self.found

    def _match(self, data: bytes) -> None:
        line = data[:LONGEST_LINE].decode("utf-8", "replace").rstrip("\r")
        pairs = [(name, m.group(1)) for name, pattern in self.patterns.items() if (m := pattern.search(line))]
        key_value = self.key_value.match(line) if self.key_value is not None else None
        for name, text in pairs + ([key_value.groups()] if key_value else []):
            try:
                self.found[name] = float(text[:-1]) / 100 if text.endswith("%") else float(text)
            except ValueError:
                continue


class Log:
    """One stream's log, written as the program prints: its first ``limit // 2`` bytes, then (on disk at most
    TAIL_EVERY_S late) its last ``limit // 2`` after a line that counts the bytes cut. What could not be written
    (a full disk) is ``error``; the output is shown and matched all the same."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path, self.head, self.tail_bytes = path, limit - limit // 2, limit // 2
        self.size, self.tail, self.written_at, self.error = 0, bytearray(), 0.0, None
        try:
            self.file = path.open("w+b", buffering=0)  # each chunk on disk as it comes
        except OSError as exc:  # a results folder that cannot be written: the output is still shown
            self.file, self.error = None, f"{path.name}: not written: {records.reason(exc)}"

    @property
    def cut(self) -> int:
        return max(0, self.size - self.head - self.tail_bytes)

    def write(self, chunk: bytes) -> None:
        start, self.size = self.size, self.size + len(chunk)
        if start < self.head:
            self._put(lambda file: _write_all(file, chunk[: self.head - start]))
            chunk = chunk[self.head - start :]
        if chunk:
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - self.tail_bytes)]
            if time.monotonic() - self.written_at >= TAIL_EVERY_S:
                self.close_tail()

    def close_tail(self) -> None:
        """The kept tail, after the head, in place of the one written before."""
        self.written_at = time.monotonic()
        mark = f"\n[{records.PROG}: {self.cut} bytes cut here]\n".encode() if self.cut else b""
        self._put(lambda file: (file.seek(self.head), _write_all(file, mark + self.tail), file.truncate()))

    def close(self) -> None:
        if self.tail:
            self.close_tail()
        if self.file is not None and os.fstat(self.file.fileno()).st_nlink == 0:
            self._put(self._restore)
        if self.file is not None:
            self.file.close()

    def _restore(self, file) -> None:
        """The log again where the program removed it (its run folder, the results folder: issue 39 §12)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        file.seek(0)
        with self.path.open("wb") as copy:
            shutil.copyfileobj(file, copy)

    def _put(self, write) -> None:
        if self.file is None:
            return
        try:
            write(self.file)
        except OSError as exc:  # a full disk: the log ends here, and the record says so
            self.error = f"{self.path.name}: {records.reason(exc)} after {min(self.size, self.head)} bytes"
            file, self.file = self.file, None
            with contextlib.suppress(OSError):
                file.close()


def _write_all(file, data: bytes) -> None:
    """All of ``data`` (an unbuffered file may take part of it: a full disk's last bytes), else an OSError."""
    view = memoryview(data)
    while view:
        view = view[file.write(view) :]


class Logged:
    """Pipes for the command's stdout and stderr whose every byte goes to this process's own stream (live), to
    its bounded Log in <run folder>/<stream>.log and to the experiment's patterns. A program that leaves a child
    holding them open is waited for 2 s, no more."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder, self.pipes, self.threads, self.logs = folder, {}, [], {}
        patterns = Matcher.from_environment()
        self.matchers = {name: patterns.twin() for name in LOGS}
        # Python's stdout into a pipe waits for 8 KB: the log would stay empty, and a killed run keep nothing
        env.setdefault("PYTHONUNBUFFERED", "1")
        try:
            self.limit = max(2, int(os.environ.get(LOG_BYTES_VARIABLE) or LOG_BYTES))
        except ValueError:
            records.warn(f"{LOG_BYTES_VARIABLE} is not a number of bytes: each log keeps {LOG_BYTES}")
            self.limit = LOG_BYTES

    def __enter__(self) -> dict[str, int]:
        import threading

        for name in LOGS:
            read, write = os.pipe()
            self.pipes[name] = write
            self.logs[name] = Log(self.folder / f"{name}.log", self.limit)
            streams = (getattr(sys, name), self.logs[name], self.matchers[name])
            thread = threading.Thread(target=_copy, args=(read, *streams))
            thread.daemon = True
            thread.start()
            self.threads.append(thread)
        return dict(self.pipes)

    def __exit__(self, *_exc) -> None:
        for write in self.pipes.values():
            os.close(write)
        for thread in self.threads:
            thread.join(2)

    def metrics(self) -> dict[str, float]:
        """What the patterns found in the output: stdout's, then stderr's (the last value of each)."""
        return {key: value for name in LOGS for key, value in self.matchers[name].close().items()}

    def facts(self) -> dict:
        """The run block's bytes cut from each log, and what of them could not be written."""
        return {
            "log_cut": {name: log.cut for name, log in self.logs.items() if log.cut},
            "unwritten": [log.error for log in self.logs.values() if log.error],
        }


def _copy(read: int, stream, log: Log, matcher: Matcher) -> None:
    """Every chunk to the stream, the log and the patterns, whichever fails: a pipe left unread would stop the
    program."""
    with open(read, "rb", buffering=0) as source:
        while chunk := source.read(65536):
            for write in (stream.buffer.write, lambda _chunk: stream.flush(), log.write, matcher.feed):
                try:
                    write(chunk)
                except (OSError, ValueError, AttributeError):  # a terminal gone: the rest goes on
                    continue
    log.close()


def output_facts(folder: Path, results: Path, status: int) -> dict:
    """The run block's log (its files, from the results folder) and, for a failed run, the end of its stderr."""
    kept = {name: (folder / f"{name}.log") for name in LOGS if _size(folder / f"{name}.log")}
    facts: dict = {"log": {name: path.relative_to(results).as_posix() for name, path in kept.items()}}
    if status != 0 and "stderr" in kept:
        with kept["stderr"].open("rb") as handle:
            handle.seek(max(0, _size(kept["stderr"]) - 16384))
            facts["stderr_tail"] = handle.read().decode("utf-8", "replace").splitlines()[-STDERR_TAIL_LINES:]
    return facts


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

"""envkit's run wrapper: the run's own output and the machine's load (issue 32 §5, §6).

One of the files that ship together as envkit_run.py (provenance.py's SHIPPED): standard library only. The command's
stdout and stderr are shown as they come and kept in its run folder; a failed run's record carries the end of its
stderr; an experiment's metric patterns (envkit.yaml's metrics, checked by envkit/project/metric_patterns.py) read
metrics from what it printed, as Guild reads an unmodified script.
"""

from __future__ import annotations

import json
import os
import re
import resource
import sys
from pathlib import Path

try:  # in envkit: modules of envkit.support
    from . import provenance_records as records
except ImportError:  # shipped: beside envkit_run.py, which put its folder on sys.path
    import provenance_records as records

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
            f"{records.PROG}: warning: {PATTERNS_VARIABLE} is not what envkit writes ({exc}): no metrics read",
            file=sys.stderr,
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

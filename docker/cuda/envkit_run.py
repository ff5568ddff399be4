"""envkit's run wrapper: run one command and write its results file, its provenance (issue 25 §6).

    python3 envkit_run.py COMMAND [ARGS...]

Standard library only, and no import of envkit: run.sh, the launch engines and the notebooks ship this file
beside the command (docker/<target>/envkit_run.py, a notebook's cell) and start the command through it, where
envkit is not installed. It reads ENVKIT_RESULTS_DIR (default ``results``), ENVKIT_EXPERIMENT (default: the
script's name), ENVKIT_TARGET (the envkit target it runs as, which the report's row is; none where unset), and
what the image, the notebook or the venv's marker says about the environment
(ENVKIT_LOCK_SHA256, ENVKIT_IMAGE, ENVKIT_IMAGE_ID, ENVKIT_IMAGE_DIGEST, ENVKIT_REVISION).

The program reports its metrics the way DVC reads them, with nothing of envkit: a ``metrics.json`` of key/value
pairs and per-step series as TSV files under ``plots/metrics/`` (dvclive's layout), in ENVKIT_METRICS_DIR (the
run's own folder ``<results>/<run>/``) or in ``dvclive/`` under the working directory, where ``Live()`` writes: read
from there only where a Python process of the run wrote a file there, since every run started in that folder
shares it.

Each run has an id, given to the program as ENVKIT_RUN_ID. A program that writes its own results record (the
seed recipes: ``<results>/<recipe>-<run>.json``) names it there (``run_id``) and keeps it: the wrapper adds its
``run`` block (experiment, argv, exit status, wall time) and the process's facts to each record of its run; other
runs' records in the folder are left alone. Any other program gets ``<results>/<run>.json``, failed or not, a name
the run takes atomically: written as the run starts (``run.status`` running, with the wrapper's host and pid) and
replaced whole as it ends, so that a wrapper killed on the way leaves a record the report counts as killed or lost
(issue 39 §7); on Linux the command dies with its wrapper. Every file is read with bounds, and what could not be
read is named in the record (``run.unread``); the wrapper forwards the signals that stop a run and exits with the
command's status.

What ran is observed, not assumed (issue 32 §3, §4): a site hook on PYTHONPATH reports what torch initialised in
each Python process of the command (the record's device is that, beside the target's label); run in a venv, the
venv's bin/ comes first on PATH; the record's versions, distributions and lock are those of the interpreter that
ran torch (``python provenance_facts.py`` asks another one), and packages other than the lock's are a warning in
the record. The command's stdout and stderr are shown and kept in its run folder (issue 32 §5). In an image
(ENVKIT_CONTAINER_PROJECT), the files the command created or changed in the project folder, which vanish with the
container, are copied into its run folder and listed in the record (``run.project_files``; issue 32 §8).

The wrapper is this file and its modules, shipped beside it under their own names (shipped()): provenance_records.py
(what the program left, read with bounds; the records written whole), provenance_facts.py (where the run ran),
provenance_device.py (the device it used), provenance_output.py (its output and the machine's load) and
provenance_files.py (what it left in an image's project folder, kept).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:  # in envkit: modules of envkit.support
    from . import provenance_device as devices
    from . import provenance_facts as facts
    from . import provenance_files as files
    from . import provenance_output as output
    from . import provenance_records as records
except ImportError:  # run as a script (envkit_run.py, shipped): its modules are beside it, even under python -P
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import provenance_device as devices
    import provenance_facts as facts
    import provenance_files as files
    import provenance_output as output
    import provenance_records as records

FILE_NAME = records.FILE_NAME  # its name beside the command
MODULES = records.MODULES
shipped = records.shipped
RESULTS_VARIABLE = "ENVKIT_RESULTS_DIR"
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
_NAME = r"[^A-Za-z0-9._-]+"
# A run's stop, cancel, preemption or hang-up: the command gets them (else this process alone would end, unrecorded).
PR_SET_PDEATHSIG = 1  # linux/prctl.h
FORWARDED = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(
            f"usage: {records.PROG}.py COMMAND [ARGS...]  (runs COMMAND and writes its results file)", file=sys.stderr
        )
        return 2 if not argv else 0
    if any(os.environ.get(name, "0") != "0" for name in NODE_RANK_VARIABLES):
        return run(argv, dict(os.environ))
    results = Path(os.environ.get(RESULTS_VARIABLE) or records.RESULTS_FOLDER)
    experiment = os.environ.get(EXPERIMENT_VARIABLE) or command_name(argv)
    # time and os rather than datetime and uuid, which the wrapper would import for these two lines alone
    started_at = time.gmtime()
    run_id = os.urandom(16).hex()  # 128 random bits, as uuid4().hex's 32 hex digits
    env = {**os.environ, RUN_ID_VARIABLE: run_id}
    try:
        run_name, folder = claim(
            results, f"{re.sub(_NAME, '-', experiment)}-{time.strftime('%Y%m%dT%H%M%SZ', started_at)}"
        )
    except OSError as exc:
        # It runs all the same (what it prints or saves elsewhere outweighs a record); this line says so at once.
        why = records.reason(exc)
        records.warn(f"cannot write results into {results} ({why}): {argv[0]} runs, and no results file is written")
        return run(argv, env)
    run_block = {
        "record_version": RECORD_VERSION,
        "run_id": run_id,
        "status": "running",  # until the end replaces this record: one left so is a run whose wrapper died
        "wrapper": facts.wrapper(),
        "experiment": experiment,
        "target": os.environ.get(records.TARGET_VARIABLE) or None,
        "argv": list(argv),
        "exit_status": None,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", started_at),
        "wall_time_s": None,
        "device": devices.observed_device([], facts.device_label()),  # none seen yet
        "unread": [],
        "unwritten": [],
    }
    path = results / f"{run_name}.json"
    before = records.stamps(results)
    started_record = begin(path, run_name, run_block)
    watched = files.watch(results)  # in a container: the project folder's files, which vanish with it
    dvclive_before = records.stamp(Path(DVCLIVE_DIR, METRICS_FILE))
    with tempfile.TemporaryDirectory(prefix="envkit-run-") as watch:
        env = devices.watched({**env, METRICS_VARIABLE: str(folder.resolve())}, Path(watch), Path(DVCLIVE_DIR))
        logged = output.Logged(folder, env)
        with logged as streams:
            mark, started = output.machine_mark(), time.perf_counter()
            status = run(argv, env, **streams)
            wall = round(time.perf_counter() - started, 3)
            busy = output.machine_facts(mark)
            run_block.update(status="ended", exit_status=status, wall_time_s=wall, **busy)
        reports = devices.process_reports(Path(watch))  # read once: the device and dvclive's use are both in them
    run_block["device"] = devices.observed_device(reports, facts.device_label())
    run_block["conditions"] = facts.conditions(env, reports, wall, busy["cpu_time_s"])
    logs = logged.facts()
    run_block.update(log_cut=logs["log_cut"], unwritten=run_block["unwritten"] + logs["unwritten"])
    try:
        ran = facts.facts_of(run_block["device"])
        run_block["warnings"] = devices.run_warnings(run_block["device"], ran)
        run_block.update(output.output_facts(folder, results, status))
        if started_record and not os.path.lexists(path):  # the program removed it (and maybe the results folder)
            run_block["warnings"].append(f"{path} was removed during the run: written again at its end")
        if watched is not None:
            run_block["project_files"] = files.keep(watched, folder, results)
        # ./dvclive changed during the run, written by a program of it: not by another run in this folder
        live = devices.wrote_dvclive(reports) and records.stamp(Path(DVCLIVE_DIR, METRICS_FILE)) != dvclive_before
        source = Path(DVCLIVE_DIR) if live else folder
        own = records.own_records(records.changed(results, before), run_id, run_block["unread"])
        where = facts.truthful_environment(facts.environment(), run_block["device"], ran)
        record_run(path, run_block, own, where, source, logged.metrics())
    except Exception as exc:  # noqa: BLE001 - whatever the record met, the command's status is what is returned
        records.warn(f"the run's results file was not written: {records.reason(exc)}")
    return status


def begin(path: Path, run_name: str, run_block: dict) -> bool:
    """The run's record as it starts (status running), small and written first: a wrapper killed before the end
    (kill -9, docker kill, a full disk) leaves it, and the report counts the run as killed or lost. Whether written."""
    environment = facts.known_at_once()
    record = {"schema_version": 3, "run_name": run_name, "run": run_block, "metrics": None, "environment": environment}
    try:
        records.write_new(path, records.serialised(record))
        records.hand_over(path)
    except OSError as exc:
        run_block["unwritten"].append(f"{path}: the record of the run's start: {records.reason(exc)}")
        return False
    return True


def record_run(
    path: Path, run_block: dict, own: list[tuple[Path, dict]], environment: dict, source: Path, printed: dict
) -> None:
    """Complete the records this run's program wrote (``own``) with the run block and ``environment``, else write its
    own at ``path`` in place of its start's, with the metrics and series of ``source`` (its folder, or dvclive's) and
    those its output printed (``printed``)."""
    folder, unread = path.with_suffix(""), run_block["unread"]
    if own:
        for own_path, document in own:
            records.adopt(own_path, document, run_block, environment)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # the recipe's record is the run's; its logs stay in the run's folder
        records.hand_over(*(own_path for own_path, _ in own), *output.kept(folder))
        return
    metrics = records.read_metrics(source / METRICS_FILE, unread)
    record = {
        "schema_version": 3,
        "run_name": folder.name,
        "run": run_block,
        "metrics": {**printed, **(metrics or {})} or metrics,
        "series": records.read_series(source / SERIES_DIR, unread),
        "environment": environment,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        records.replace(path, records.within_limit(record, unread))
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        # a full disk: the record outranks the run's logs, which give way to it (and it says so)
        for name in run_block.pop("log", {}):
            with contextlib.suppress(OSError):
                os.truncate(folder / f"{name}.log", 0)
        run_block["unwritten"].append(f"{folder}: the disk was full: its logs were emptied to write this record")
        records.replace(path, records.within_limit(record, unread))
    records.hand_over(path, *output.kept(folder))


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
        process.append(subprocess.Popen(argv, env=env, preexec_fn=_dies_with_wrapper(), **streams))
    except OSError as exc:
        print(f"{records.PROG}: error: cannot start {argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    for number in pending:
        process[0].send_signal(number)
    code = process[0].wait()  # a signal's handler runs, and the wait goes on (PEP 475)
    return 128 - code if code < 0 else code


def _dies_with_wrapper():
    """Linux: what makes the command get SIGKILL when the wrapper dies (kill -9 of it, the OOM killer) rather than
    run on, orphaned, with no one to record it (prctl's PR_SET_PDEATHSIG); None elsewhere."""
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
    except (OSError, AttributeError):
        prctl = None
    if prctl is None:
        return None
    wrapper = os.getpid()

    def die_with_wrapper() -> None:  # in the child, before it runs the command
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != wrapper:  # the wrapper died before the line above
            os._exit(128 + signal.SIGKILL)

    return die_with_wrapper


def _from_keyboard(number: int) -> bool:
    """Whether a SIGINT or SIGQUIT came from this process's terminal: it is in the terminal's foreground group."""
    if number not in (signal.SIGINT, signal.SIGQUIT):
        return False
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (AttributeError, OSError, ValueError):  # no stdin, or not a terminal
        return False


if __name__ == "__main__":
    title, began = os.environ.pop(records.TITLE_VARIABLE, None), time.perf_counter()
    exit_status = main(sys.argv[1:])
    if title:  # envkit experiment handed this run over: it ends here, as envkit would have said
        print(records.ended(title, exit_status, time.perf_counter() - began), file=sys.stderr, flush=True)
    sys.exit(exit_status)

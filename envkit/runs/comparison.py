"""A command's runs as comparisons (issue 32 §2): the runs that did the same work, a row per target.

Runs of an experiment did the same work when they ran the same arguments (the words after the script: ``python
train.py --epochs 1`` and ``torchrun ... train.py --epochs 1`` alike) on the same data. A comparison holds those
runs, one row per target, each target on its own lock: a target whose runs used several locks joins with its
newest lock's runs, and each other lock's runs are a comparison of their own. Runs whose arguments, data or locks
differ are never pooled, and the title of each comparison of an experiment that has several says what differs.

Every key is read from the record (envkit.runs.results.RunResult): the experiment and argv of the run wrapper's
block (its ``args`` where it writes them), the record's ``data`` where it names it, the target the wrapper
records (``run.target``, ENVKIT_TARGET; a record without it: where the run ran, its device and image, host or
notebook), and the environment's lock. The run block's device, where the record has one, says what the program
really initialised: a run on a GPU or TPU target that initialised no accelerator is a CPU run, a row of its own
kept out of speed-ups.
A row's wall time and every metric are mean ± std over its successful runs, as envkit.runs.rows makes any row;
counters (report.yaml ``counters``: dvclive's ``step``) are not metrics; series are curves with each run's final
value, their first step apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from envkit.runs.environments import cpu_stand_in, notebook_cpu_mode, promised, short, used_device
from envkit.runs.grouping import Placement
from envkit.runs.model import Section, comparison_device_rank, notebook_label
from envkit.runs.published import section_facts
from envkit.runs.results import RunResult
from envkit.runs.rows import measured_row


def arguments_of(run: RunResult) -> tuple[str, ...]:
    """The run's arguments: the run block's ``args`` where the wrapper writes them, else the words of argv after
    the script (after the program for a command that runs no .py file), so an interpreter's path or a launcher's
    flags are never a difference in the work."""
    recorded = run.run.get("args")
    if isinstance(recorded, list) and all(isinstance(word, str) for word in recorded):
        return tuple(recorded)
    argv = run.run["argv"]
    script = next((index for index, word in enumerate(argv) if word.endswith(".py")), 0)
    return tuple(argv[script + 1 :])


def place_of(run: RunResult) -> str:
    """Where a command ran: its device, and the notebook, else the image, else the host."""
    environment = run.environment
    where = (
        notebook_label(run.notebook)
        if run.notebook is not None
        else environment.get("image") or environment.get("host") or "unknown host"
    )
    return f"{environment.get('device_type') or 'unknown device'} on {where}"


def target_of(run: RunResult) -> str:
    """The target the record names, else where the run ran."""
    return run.target or place_of(run)


def stand_in_label(target: str, runs: list[RunResult]) -> str:
    """A stand-in's row, named so in every table, figure and file: 'colab-t4 (CPU mode)', 'cuda (CPU run)'."""
    return f"{target} (CPU mode)" if notebook_cpu_mode(runs[0]) else f"{target} (CPU run)"


def _data_key(run: RunResult) -> str | None:
    return None if run.data is None else json.dumps(run.data, sort_keys=True)


def _work_key(run: RunResult) -> tuple:
    return (run.experiment, arguments_of(run), _data_key(run))


def _given(target: str, runs: list[RunResult]) -> dict:
    """What a comparison knows of a target's runs on one lock before their numbers (envkit.runs.rows pools those):
    the device its target promised (the cpu for a stand-in), where they ran, the lock, and what they initialised."""
    stand_in = cpu_stand_in(runs[0])
    configuration = {"device": "cpu" if stand_in else promised(runs[0])}
    return dict(
        recipe=None,
        configuration=configuration,
        device_rank=comparison_device_rank(configuration),
        experiment=runs[0].experiment,
        place=stand_in_label(target, runs) if stand_in else target,
        target=target,
        lock=runs[0].environment.get("lock_sha256"),
        device=" / ".join(sorted({used_device(run)[0] for run in runs})),
        device_checked=all(used_device(run)[1] is not None for run in runs),
    )


def _newest(runs: list[RunResult]) -> tuple:
    return max((run.started_at or "", str(run.path)) for run in runs)


def _split_by_lock(
    runs: list[RunResult], current: dict[str, str | None]
) -> tuple[list[RunResult], list[tuple[str, str | None, list[RunResult], str]]]:
    """The runs of one work: those that join its comparison (each target's current lock's, where the project
    says it (``current``: a target's lock sha256, None where unlocked), else its newest runs'), and (target,
    lock, runs, why apart) for every other lock of a target, a comparison each."""
    by_target: dict[str, dict[str | None, list[RunResult]]] = {}
    for run in runs:
        by_target.setdefault(target_of(run), {}).setdefault(run.environment.get("lock_sha256"), []).append(run)
    joined: list[RunResult] = []
    apart = []
    for target, locks in sorted(by_target.items()):
        ordered = sorted(locks.items(), key=lambda item: _newest(item[1]), reverse=True)
        named = any(run.target is not None for _, lock_runs in ordered for run in lock_runs)
        if named and target in current and current[target] in locks:
            ordered.sort(key=lambda item: item[0] != current[target])  # stable: the current lock first
        joined += ordered[0][1]
        why = _why_apart(target if named else None, current)
        apart += [(target, lock, lock_runs, why) for lock, lock_runs in ordered[1:]]
    return joined, apart


def _why_apart(target: str | None, current: dict[str, str | None]) -> str:
    """Why a lock's runs stand apart: not the target's current lock, where the records name the target and the
    project has its lock; else only that other runs of it are newer (never "older": nothing here says which
    lock came first, nor, where the records name no target, whose lock it is)."""
    if target is None:
        return "not the lock of the newest runs there; the records name no target"
    if target in current:
        lock = current[target]
        return f"the target's current lock is {short(lock)}" if lock else "the target is unlocked now"
    return "not the lock of the target's newest runs"


def arguments_text(arguments: Iterable[str]) -> str:
    """A comparison's arguments in markdown: `--epochs 1`, or none."""
    words = " ".join(arguments)
    return f"`{words}`" if words else "none"


def _differences(work: tuple, all_works: list[tuple], lock: tuple[str, str | None, str] | None) -> list[str]:
    """What sets a comparison apart from its experiment's others: the facets whose values differ among them."""
    _, arguments, data = work
    differs = []
    if len({other[1] for other in all_works}) > 1:
        differs.append(f"arguments {arguments_text(arguments)}")
    if len({other[2] for other in all_works}) > 1:
        differs.append(f"data {data if data is not None else 'not recorded'}")
    if lock is not None:
        target, sha, why = lock
        differs.append(f"{target} on {'lock ' + short(sha) if sha else 'no lock'} ({why})")
    return differs


def _lock_groups(
    runs: list[RunResult], current: dict[str, str | None]
) -> dict[int, tuple[str, str | None, str] | None]:
    """Each run's lock, by id: None where it joins its work's comparison, else (target, lock, why apart)."""
    works: dict[tuple, list[RunResult]] = {}
    for run in runs:
        works.setdefault(_work_key(run), []).append(run)
    groups: dict[int, tuple[str, str | None, str] | None] = {}
    for work_runs in works.values():
        joined, apart = _split_by_lock(work_runs, current)
        groups.update({id(run): None for run in joined})
        groups.update({id(run): (target, lock, why) for target, lock, lock_runs, why in apart for run in lock_runs})
    return groups


def command_placements(
    runs: list[RunResult], facts: dict, current: dict[str, str | None] | None = None
) -> list[tuple[RunResult, Placement]]:
    """Where each of a command's runs goes (envkit.runs.grouping): its comparison, keyed for the report's order by
    experiment (after the recipes' sections), then arguments and data, each target's other locks after; its row,
    by target (a CPU stand-in apart). ``current``: the project's targets' locks (sha256, None where unlocked), which
    a named target's runs join on."""
    locks = _lock_groups(runs, current or {})
    return [(run, _placement(run, facts, locks[id(run)])) for run in runs]


def _placement(run: RunResult, facts: dict, lock: tuple[str, str | None, str] | None) -> Placement:
    work = _work_key(run)
    experiment = work[0]
    own = section_facts(facts, None, experiment)

    def section(works: list[tuple]) -> Section:
        return Section(
            None,
            None,
            own,
            [own.get("title") or f"experiment {experiment}"],
            experiment=experiment,
            work={"arguments": list(work[1]), "data": run.data},
            differs=_differences(work, works, lock),
        )

    return Placement(
        section_key=("~", experiment, work[1], work[2] or "", "" if lock is None else json.dumps(lock[:2])),
        row_key=(target_of(run), cpu_stand_in(run)),
        siblings=("~", experiment),
        work=work,
        section=section,
        row=lambda runs, made: measured_row(runs, made.facts, **_given(target_of(runs[0]), runs)),
    )

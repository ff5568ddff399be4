"""A speed-up that more devices than were used would be needed for: flagged, not a result (issue 32, `make demo`
on 2 CPUs).

Against a baseline on the same kind of device, n times the devices (GPUs, TPU cores, or a CPU's processes) can make
a run at most n times faster: DDP×2 against one process read 2.53×, 5.22× and 6.27× on a two-core host, where the
one process's thread count, not the second process, made the difference. Such a row keeps its measured ratio in its
cell with the reason, is left out of the speed-up figure, and its csv/json ``speedup`` is null (``speedup_beyond``
says why). The bound holds only where the count is all that differs: rows on other hardware than their baseline (a
GPU against the CPU, an H100 against a T4) or another TPU backend have none, nor do rows that used no more devices
than the baseline, or whose records do not say how many devices or processes they used.
"""

from __future__ import annotations

from envkit.runs.model import Row

# What a row's parallel units are, by the device they ran on.
UNIT_NOUNS = {"cpu": "processes", "cuda": "GPUs", "tpu": "TPU cores"}


def _command_units(row: Row) -> int | None:
    """The CUDA devices a command's runs used (the run wrapper's device block), where all its runs agree; None
    elsewhere (the block does not tell a CPU program's working processes from torchrun's launcher)."""
    counts = {(run.device or {}).get("count") for run in row.results}
    if row.cpu_stand_in or len(counts) != 1:
        return None
    count = counts.pop()
    return count if isinstance(count, int) and count > 0 else None


def parallel_units(row: Row) -> tuple[str, int] | None:
    """(device, how many of it) the row's runs spread their work over: a recipe's (or a published source's)
    world size, or TPU cores where more; a command's CUDA devices. None where the record does not say."""
    device = row.configuration.get("device")
    if device not in UNIT_NOUNS:
        return None
    if row.place is not None:  # a command's row
        count = _command_units(row)
        return None if count is None else (device, count)
    size = max(row.configuration.get("world_size") or 1, row.configuration.get("cores") or 1)
    return device, size


def _hardware(row: Row) -> tuple:
    """What the row ran on besides the count: its device's name (the device block's for a command, else the
    environment's; a published row's environment note) and its TPU backend."""
    names = {
        (run.device or {}).get("name") if row.place is not None else run.environment.get("device_name")
        for run in row.results
    }
    return (tuple(sorted(map(str, names))) if names else (row.environment,), row.configuration.get("backend"))


def beyond_reason(row: Row, base: Row) -> str | None:
    """Why ``row``'s speed-up over ``base`` is not a result: on the same hardware it used more devices than the
    baseline, and its speed-up exceeds their ratio ("beyond 2 processes"); None where it does not, or no bound
    applies."""
    if row.speedup is None or row is base:
        return None
    mine, theirs = parallel_units(row), parallel_units(base)
    if mine is None or theirs is None or mine[0] != theirs[0] or mine[1] <= theirs[1]:
        return None
    if _hardware(row) != _hardware(base):
        return None
    bound = mine[1] / theirs[1]
    if row.speedup <= bound:
        return None
    against = "" if theirs[1] == 1 else f" against {theirs[1]}"
    return f"beyond {mine[1]} {UNIT_NOUNS[mine[0]]}{against}: not a result"


def flag_beyond(rows: list[Row]) -> None:
    """Mark each row whose speed-up is not a like-for-like result against its baseline (Row.speedup_beyond): one
    that exceeds what its devices could give, else one measured on a busy host or under another thread budget
    (conditions_flag)."""
    for row in rows:
        base = next(
            (other for other in rows if other.label == row.baseline and other.comparable_key() == row.comparable_key()),
            None,
        )
        if base is None or row.speedup is None or row is base:
            row.speedup_beyond = None
            continue
        row.speedup_beyond = beyond_reason(row, base) or conditions_flag(list(row.results), list(base.results))


def conditions_flag(results: list, base: list) -> str | None:
    """What a row's speed-up over its baseline was measured under, where it is not a result or not like for like,
    from the run wrapper's records (run.conditions, run.load_average; issue 40 §5). ``results``: the row's runs,
    ``base``: its baseline's (RunResult). A host busy beyond its usable CPUs as a run started (other work alone), or
    as it ended beyond the CPUs plus the run's own threads: "host busy: load 9.1 on 2 CPUs; this speed-up is not a
    result". Else threads or usable CPUs other than the baseline's: "1 thread on 2 CPUs, the baseline 2 threads on 2
    CPUs: not like for like". None where neither, or the records do not say (older ones)."""
    for run in (*results, *base):
        block = run.run or {}
        conditions, load = block.get("conditions"), block.get("load_average") or []
        if not conditions or not load:
            continue
        usable = conditions["usable_cpus"]
        if load[0] > usable or load[-1] > usable + _threads(conditions):
            return f"host busy: load {max(load):.1f} on {usable:g} CPUs; this speed-up is not a result"
    mine, theirs = _budget(results), _budget(base)
    if mine is None or theirs is None or mine == theirs:
        return None
    return f"{_budget_text(*mine)}, the baseline {_budget_text(*theirs)}: not like for like"


def _threads(conditions: dict) -> int:
    """The threads a run computed with: torch's, else OMP_NUM_THREADS, else one."""
    omp = conditions["thread_variables"].get("OMP_NUM_THREADS") or ""
    return max(conditions["torch_threads"] or [int(omp) if omp.isdigit() else 1])


def _budget(results: list) -> tuple[int, float] | None:
    """(threads, usable CPUs) all of ``results`` ran with; None where they differ or a record does not say."""
    budgets = {
        (_threads(run.run["conditions"]), run.run["conditions"]["usable_cpus"])
        for run in results
        if run.run and run.run.get("conditions")
    }
    return (
        budgets.pop() if len(budgets) == 1 and all(run.run and run.run.get("conditions") for run in results) else None
    )


def _budget_text(threads: int, cpus: float) -> str:
    return f"{threads} thread{'s' if threads != 1 else ''} on {cpus:g} CPU{'s' if cpus != 1 else ''}"

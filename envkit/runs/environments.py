"""How the report names a run's environment and what it really initialised (the run wrapper's device block: a CPU
stand-in for an accelerator's target), and tells a section's environments apart.

Two runs ran one environment when report.yaml's ``environment_facts`` agree (python major.minor, torch, TPU
backend, lock): rows whose runs differ get a letter each (A, B, ...) and a note under their table.
"""

from __future__ import annotations

import string

from envkit.runs.columns import words_and
from envkit.runs.model import Section
from envkit.runs.published import report_facts
from envkit.runs.results import ENVIRONMENT_KEYS, RunResult

# The device block's words for "no accelerator initialised".
NO_ACCELERATOR = (None, "", "none", "cpu")


def short(value) -> str:
    # A sha256 is told apart by its first 12 digits, like an image ID.
    return "none" if value is None else value[:12] if len(str(value)) == 64 else str(value)


def used_device(run: RunResult) -> tuple[str, bool | None]:
    """What the run really initialised, in words, and whether it was an accelerator; (the label's device, None)
    where the record has no device block, or one that observed nothing (a program that is not Python). The
    block (the run wrapper's run.device) names the ``accelerator`` initialised (cuda, tpu, else cpu), its
    ``name`` and ``count``, and the target's ``label``."""
    block = run.device
    if block is None or block.get("observed") is False:
        label = run.environment.get("device_name") or run.environment.get("device_type") or "unknown device"
        return f"{label} (not checked)", None
    kind = block.get("accelerator")
    name = block.get("name") or kind or "CPU"
    if kind in NO_ACCELERATOR:
        return f"{name} (no accelerator)", False
    count = block.get("count")
    return (f"{name} ×{count}" if isinstance(count, int) and count > 1 else str(name)), True


def promised(run: RunResult) -> str | None:
    """The device the run's target promised: the device block's label, else the environment's device type."""
    block = run.device or {}
    return block["label"] if "label" in block else run.environment.get("device_type")


def notebook_cpu_mode(run: RunResult) -> bool:
    """A notebook run in CPU mode (``notebook.cpu_mode`` in the record): its accelerator's name, the CPU's work."""
    return bool((run.notebook or {}).get("cpu_mode"))


def cpu_stand_in(run: RunResult) -> bool:
    """A run of an accelerator's target (its label is not the cpu) that initialised no accelerator, or a notebook
    run in CPU mode, whatever its device block says."""
    return notebook_cpu_mode(run) or (promised(run) not in NO_ACCELERATOR and used_device(run)[1] is False)


def environment_line(environment: dict, with_lock: bool = True) -> str:
    """The environment in words; ``with_lock`` False where the table has a lock column of its own (a command's)."""
    count = environment.get("device_count")
    name = environment.get("device_name") or environment.get("device_type") or "unknown device"
    # For CPUs device_count is the logical CPUs, which "×2" would read as two sockets.
    several = "{name}, {count} CPUs" if environment.get("device_type") == "cpu" else "{name} ×{count}"
    parts = [several.format(name=name, count=count) if isinstance(count, int) and count > 1 else name]
    # torch's CUDA build shows in its version tag already; on GPUs it is the CUDA runtime that ran.
    keys = (
        ("python", "torch", "torchvision", "torch_xla", "torch_tpu")
        + (("torch_cuda_build",) if environment.get("device_type") == "cuda" else ())
        + ("image",)
    )
    for key in keys:
        if environment.get(key):
            parts.append(f"{'cuda' if key == 'torch_cuda_build' else key} {environment[key]}")
    if with_lock and environment.get("lock_sha256"):
        parts.append(f"lock {short(environment['lock_sha256'])}")
    return ", ".join(parts)


def environment_facts(run: RunResult) -> tuple:
    """The facts that make two runs' environments comparable (report.yaml environment_facts)."""
    return tuple(
        _fact(key, run.environment[key] if key in ENVIRONMENT_KEYS else run.configuration.get(key))
        for key in report_facts()["environment_facts"]
    )


def _fact(key: str, value):
    # A lock is made for one Python minor, and an image's patch release is its base's, not the lock's:
    # a host venv and an image of one lock run one environment even where the patch releases differ.
    if key == "python" and isinstance(value, str):
        return ".".join(value.split(".")[:2])
    return value


def describe_environment(facts: tuple) -> str:
    return ", ".join(f"{key} {short(value)}" for key, value in zip(report_facts()["environment_facts"], facts))


def mark_environments(section: Section) -> None:
    """Letter each environment of a section whose measured rows ran in more than one."""
    seen: list[tuple] = []
    for row in section.rows:
        seen += [facts for facts in row.environments if facts not in seen]
    if len(seen) < 2:
        return
    section.environments = seen
    for row in section.rows:
        row.mark = ",".join(environment_letter(seen.index(facts)) for facts in row.environments)


def environment_groups(section: Section) -> list[tuple[str, list[RunResult]]]:
    """The section's environments as its table letters them (mark_environments: report.yaml's environment_facts),
    each with its runs in the table's order: the one identity the table, its note and the page's differences share.
    None where its measured runs ran in one environment."""
    return [
        (
            environment_letter(index),
            [run for row in section.rows for run in row.results if environment_facts(run) == facts],
        )
        for index, facts in enumerate(section.environments)
    ]


def environment_letter(index: int) -> str:
    return string.ascii_uppercase[index % 26] + (str(index // 26) if index >= 26 else "")


def environments_text(section: Section) -> str:
    """'2 environments that differ in backend (A = ...; B = ...)'."""
    names = report_facts()["environment_facts"]
    differing = [name for index, name in enumerate(names) if len({facts[index] for facts in section.environments}) > 1]
    listed = "; ".join(
        f"{environment_letter(i)} = {describe_environment(facts)}" for i, facts in enumerate(section.environments)
    )
    return f"{len(section.environments)} environments that differ in {words_and(differing)} ({listed})"

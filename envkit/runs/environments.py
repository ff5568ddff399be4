"""How the report names a run's environment, and tells a section's environments apart.

Two runs ran one environment when report.yaml's ``environment_facts`` agree (python major.minor, torch, TPU
backend, lock): rows whose runs differ get a letter each (A, B, ...) and a note under their table.
"""

from __future__ import annotations

import string

from envkit.runs.columns import words_and
from envkit.runs.model import Section
from envkit.runs.published import report_facts
from envkit.runs.results import ENVIRONMENT_KEYS, RunResult


def short(value) -> str:
    # A sha256 is told apart by its first 12 digits, like an image ID.
    return "none" if value is None else value[:12] if len(str(value)) == 64 else str(value)


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

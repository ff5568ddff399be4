"""The current lock of each target a report's runs name (bug B4: a run on its target's current lock was titled
"an older lock of the target"). Apart from envkit.runs.report, which the notebooks embed: they carry no project
config or lock files to read.
"""

from __future__ import annotations

from pathlib import Path

from envkit.errors import EnvkitError
from envkit.lock.lockfile import lock_path, read_lock
from envkit.project.load import load_config


def current_locks(config: Path, targets: set) -> dict[str, str | None]:
    """The lock sha256 of each of ``targets`` the project at ``config`` has (None: unlocked), which its runs'
    locks are told against; none outside a project, or where its config cannot be read (the report still reads
    the results)."""
    names = sorted(name for name in targets if name is not None)
    if not names or not config.is_file():
        return {}
    try:
        project = load_config(config)
        locks = {name: read_lock(lock_path(project, name)) for name in names if name in project.targets}
    except EnvkitError:
        return {}
    return {name: None if lock is None else lock.sha256 for name, lock in locks.items()}

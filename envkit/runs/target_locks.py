"""The current lock of each target a report's runs name (bug B4: a run on its target's current lock was titled
"an older lock of the target"). Apart from envkit.runs.report, which the notebooks embed: they carry no project
config or lock files to read.

Only what finds a lock is read: envkit.yaml's document (its schema checked), its target names, which of them are
notebook targets and its `output` folders; not the matrix, the experiments, the requirements or the secrets check
that building every target costs (`envkit report` reads results, and a target's lock is where it is whatever else
the config gets wrong).
"""

from __future__ import annotations

from pathlib import Path

from envkit.errors import EnvkitError
from envkit.lock.lockfile import read_lock, target_lock_path
from envkit.project.document import read_document
from envkit.project.output import read_output


def current_locks(config: Path, targets: set) -> dict[str, str | None]:
    """The lock sha256 of each of ``targets`` the project at ``config`` has (None: unlocked), which its runs'
    locks are told against; none outside a project, or where its config cannot be read (the report still reads
    the results)."""
    names = sorted(name for name in targets if name is not None)
    if not names or not config.is_file():
        return {}
    try:
        data, where = read_document(config)
        root = config.resolve().parent
        output = read_output(data, root, where)
        declared = data["targets"]
        locks = {
            name: read_lock(target_lock_path(root, output, name, declared[name].get("platform") is not None))
            for name in names
            if name in declared
        }
    except EnvkitError:
        return {}
    return {name: None if lock is None else lock.sha256 for name, lock in locks.items()}

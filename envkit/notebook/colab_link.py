"""`envkit notebook --colab-link`: the "Open in Colab" link of a committed notebook, at a commit that holds it.

A link names a GitHub repository (the config's ``source``), a commit and the notebook's path from the
repository's top; it is given only for a notebook that git finds in that commit, so it never points at
nothing. Committed notebooks carry the same link to ``main`` in their first cell (builder.colab_url makes both).
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.notebook.builder import colab_url, fitting_experiment, notebook_path, notebook_target
from envkit.project.config import ProjectConfig


def colab_link(config: ProjectConfig, experiment: str, target_name: str, revision: str | None) -> str:
    """The link of the committed notebook of ``experiment`` for ``target_name`` at ``revision`` (HEAD when None), or
    one line saying why there is none: not a Colab target, no such commit, the notebook not in it, no GitHub source."""
    target = notebook_target(config, target_name)
    fitting_experiment(config, target, experiment)
    if target.platform != "colab":
        raise EnvkitError(f"--colab-link: target {target.name} runs on {target.platform}, not colab")
    path = notebook_path(config.output, target.name, experiment)
    commit = _commit(config.root, revision)
    if _git(config.root, "cat-file", "-e", f"{commit}:./{path.as_posix()}") is None:
        raise EnvkitError(
            f"--colab-link: {path} is not committed at {revision or 'HEAD'} ({commit[:12]}): list "
            f"{experiment} in target {target.name}'s notebooks, run envkit render --all and commit"
        )
    url = colab_url(config, path, commit)
    if url is None:
        raise EnvkitError(f"--colab-link needs the config's source to be a GitHub repository (source: {config.source})")
    return url


def _git(root: Path, *argv: str) -> str | None:
    """git's output in ``root``, or None when it fails (or git is missing)."""
    try:
        done = subprocess.run(["git", *argv], cwd=root, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _commit(root: Path, revision: str | None) -> str:
    """The commit ``revision`` names, as git resolves it (HEAD when None); anything else is one line."""
    if revision == "":
        raise EnvkitError("--revision '': name a commit, branch or tag (leave --revision out for HEAD)")
    if _git(root, "rev-parse", "--git-dir") is None:
        raise EnvkitError(f"--colab-link: {root} is not a git checkout, so no notebook is committed there")
    commit = _git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{revision or 'HEAD'}^{{commit}}")
    if commit is None:
        raise EnvkitError(
            f"--revision {shlex.quote(revision or 'HEAD')}: not a commit of {root} (git rev-parse --verify); "
            "name a commit, branch or tag"
        )
    return commit

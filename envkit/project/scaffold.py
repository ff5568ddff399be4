"""`envkit init`: the files that make an existing repository an envkit project, computed, not written.

Its envkit.yaml names the default targets (cpu, cuda, tpu-vm and the notebook targets) at the torch
the user's requirements pin (else the newest release that cpu, cuda and tpu-vm all have a build of, which
their specifier allows), wires those requirements into every lock (``requirements:``), and holds one
experiment for each entry script (envkit.project.entries: found by what it is) on every default target, or on
the GPU targets only where it opens CUDA only. A script that reads LOCAL_RANK or RANK, or calls
init_process_group, runs under torchrun. envkit.mk gives
them make targets; a Makefile that includes it is written only where there is none. The caller writes the files,
all or none: nothing here touches the disk but reading.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.project import DEFAULT_CONFIG
from envkit.project.config import DEFAULT_PYTHON
from envkit.project.dependencies import PYPROJECT, Dependency, read_dependencies
from envkit.project.entries import Script, survey
from envkit.project.matrix import Matrix, load_matrix, version_in_range, version_key
from envkit.support.bounded_load import Refused, read_text
from envkit.support.provenance_records import RESULTS_FOLDER

MAKE_INCLUDE = "envkit.mk"
# Where a project's requirements are looked for, in order: a .in file is the input a lock is made from.
REQUIREMENTS_FILES = ("requirements.in", "requirements.txt", PYPROJECT)
# More entry scripts than this at the top of a repository are not scripts a user runs one by one.
MAX_SCRIPTS = 100
# What envkit makes inside a project, which git should not track (.gitignore's block, marked to be found again):
# venvs, runs' results, data, caches, and envkit launch's scripts and manifests (jobs/ by default: they hold this
# host's paths, and each launch writes them again).
GITIGNORE_MARK = "# envkit: what envkit makes here (envkit init)"
GITIGNORE = (GITIGNORE_MARK, "/.venv*/", f"/{RESULTS_FOLDER}/", "/data/", "/.cache/", "/jobs/")
# The image targets init writes, the first the default of `envkit experiment` and make.
IMAGE_TARGETS = ("cpu", "cuda", "tpu-vm")
# The targets init writes that have a GPU: a script that opens CUDA only (and no CPU path) runs on these alone.
GPU_TARGETS = ("cuda", "colab-t4")


@dataclass(frozen=True)
class Scaffold:
    files: dict[str, str]  # path relative to the project -> text
    requirements: str | None  # the file wired in, or None
    surveyed: tuple[Script, ...]  # every top-level *.py: the entry scripts and the skipped, each with its reason
    torch: str
    gitignore: str | None = None  # .gitignore's new text (its block added), or None where it has the block

    @property
    def found(self) -> tuple[Script, ...]:
        return tuple(script for script in self.surveyed if script.entry)

    @property
    def scripts(self) -> tuple[str, ...]:
        """The entry scripts that have an experiment: the first MAX_SCRIPTS."""
        return tuple(script.name for script in self.found[:MAX_SCRIPTS])


def scaffold(root: Path, make_include: str) -> Scaffold:
    """What `envkit init` writes in ``root``; ``make_include`` is envkit.mk's packaged template (Jinja)."""
    requirements, lines = _requirements(root)
    matrix = load_matrix()
    torch = _torch(matrix, lines)
    surveyed = survey(root)
    found = tuple(script for script in surveyed if script.entry)[:MAX_SCRIPTS]
    config = _config(matrix, torch, requirements, found)
    files = {DEFAULT_CONFIG.as_posix(): config, MAKE_INCLUDE: _make_include(make_include)}
    if not any(os.path.lexists(root / name) for name in ("Makefile", "makefile", "GNUmakefile")):
        # make alone lists the targets: the include keeps a Makefile's own first target the default.
        files["Makefile"] = (
            f"# envkit's targets: make help lists them.\ninclude {MAKE_INCLUDE}\n\n.DEFAULT_GOAL := help\n"
        )
    return Scaffold(files, requirements, surveyed, torch, _gitignore(root))


def _make_include(template: str) -> str:
    """envkit.mk, given the results folder's name as data (its home: the run wrapper's RESULTS_FOLDER)."""
    import jinja2

    environment = jinja2.Environment(keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)
    return environment.from_string(template).render(results_folder=RESULTS_FOLDER)


def _gitignore(root: Path) -> str | None:
    """.gitignore with envkit's block added (None where it has it already): GITIGNORE's folders."""
    path = root / ".gitignore"
    try:
        text = read_text(path) if os.path.lexists(path) else ""
    except (OSError, Refused) as exc:
        raise EnvkitError(f"{path}: cannot be read ({exc}); make it a text file, or remove it") from None
    if GITIGNORE_MARK in text:
        return None
    return text + ("\n" if text and not text.endswith("\n") else "") + "\n".join(GITIGNORE) + "\n"


def _requirements(root: Path) -> tuple[str | None, tuple[Dependency, ...]]:
    for name in REQUIREMENTS_FILES:
        path = root / name
        if path.is_file():
            lines = read_dependencies(path, name)
            if lines or name != PYPROJECT:
                return name, lines
    return None, ()


def _torch(matrix: Matrix, lines: tuple[Dependency, ...]) -> str:
    """The torch the requirements pin, else the newest that every default image target has a build of (cpu;
    cuda; tpu-vm on torch_xla or torch_tpu) on the default Python, which their specifier allows."""
    from packaging.specifiers import SpecifierSet

    named = next((line for line in lines if line.name == "torch"), None)
    spec = named.specifier if named else ""
    pinned = re.fullmatch(r"===?([0-9][0-9.]*)(\+\w+)?", spec)
    if pinned:
        version = pinned.group(1)
        matrix.torch_release(f"{named.where}: torch", version)  # one line when envkit's matrix lacks it
        return version
    allowed = SpecifierSet(spec)
    supported = _supported(matrix)
    fitting = [version for version in supported if version in allowed]
    if not fitting:
        raise EnvkitError(
            f"{named.where}: {named.line!r} allows no torch of envkit's matrix that cpu, cuda and tpu-vm all have a "
            f"build of; pin one (torch=={supported[-1]}), `envkit matrix` lists them"
        )
    return fitting[-1]


def _supported(matrix: Matrix) -> list[str]:
    """The torch releases, oldest first, with a CUDA build, a torchvision, the default Python and a TPU backend."""
    paired = {torch for release in matrix.torch_xla.values() for torch, _ in release.pairs}
    return sorted(
        (
            version
            for release in matrix.torch.values()
            if release.cuda_choices() and release.torchvision and version_in_range(DEFAULT_PYTHON, release.python)
            for version in release.versions
            if version in paired or any(version_in_range(version, tpu.torch) for tpu in matrix.torch_tpu.values())
        ),
        key=version_key,
    )


def _config(matrix: Matrix, torch: str, requirements: str | None, found: tuple[Script, ...]) -> str:
    release = matrix.torch_release("torch", torch)
    cuda = matrix.cuda[release.cuda_choices()[0]].cuda if release.cuda_choices() else None
    xla = next((x for rel in matrix.torch_xla.values() for t, x in rel.pairs if t == torch), None)
    q = f'"{torch}"'
    py = f'"{DEFAULT_PYTHON}"'
    lines = [
        "# envkit project configuration, written by `envkit init`: the experiments and the targets they run on.",
        "# Supported versions: `envkit matrix`. After editing: `envkit lock --all`, then `envkit render --all`,",
        "# and commit docker/ and notebooks/.",
    ]
    if requirements:
        lines += [
            "",
            "# Resolved with each target's torch build into every target's lock.",
            f"requirements: {requirements}",
        ]
    targets = [*IMAGE_TARGETS, "colab-t4", *(("colab-tpu", "kaggle-tpu") if xla else ())]
    lines += [
        "",
        "# One per entry script, on the targets it lists (the first is the default): make <name> TARGET=cuda,",
        "# envkit experiment <name> --target cuda, envkit launch <name>, envkit notebook <name> --target colab-t4.",
        "# A script that only prints its metrics gets them read from its output by a regex with one group each:",
        "#   metrics: {patterns: {accuracy: 'Accuracy: \\d+/\\d+ \\((\\d+%)\\)'}}   (57% is 0.57; docs/experiments.md)",
    ]
    lines.append("experiments:" if found else "experiments: {}")
    for name, script in zip(experiment_names(tuple(s.name for s in found)), found, strict=True):
        lines += [f"  {name}:", f"    summary: {script.name}", f"    command: [python, {script.name}]"]
        if script.cuda_only:
            lines += [f"    # {', '.join(script.cuda_only)} and no CPU path: the GPU targets only"]
        lines += [f"    targets: [{', '.join(GPU_TARGETS if script.cuda_only else targets)}]"]
        # A torchrun script: one process per GPU of the target (every GPU), or per TPU/CPU device it is given.
        lines += ["    scale: torchrun", "    gpus: all"] if script.torchrun else ["    gpus: first"]
    lines += ["", "targets:", "  cpu:", "    kind: cpu", f"    torch: {q}", f"    python: {py}"]
    lines += ["  cuda:", "    kind: cuda", f"    torch: {q}"] + ([f'    cuda: "{cuda}"'] if cuda else [])
    lines += [f"    python: {py}", f"    base_image: python:{DEFAULT_PYTHON}-slim-bookworm"]
    lines += ["  tpu-vm:", "    kind: tpu-vm", f"    torch: {q}"]
    lines += ["    backend: torch_xla", f'    torch_xla: "{xla}"'] if xla else ["    backend: torch_tpu"]
    lines += [f"    python: {py}"]
    lines += ["  # Notebook targets: `envkit notebook <experiment> --target <name>` writes one."]
    lines += ["  colab-t4:", "    platform: colab", "    accelerator: T4", f"    torch: {q}", f"    python: {py}"]
    if xla:
        for name, platform, accelerator in (("colab-tpu", "colab", "v5e-1"), ("kaggle-tpu", "kaggle", "TpuV5E8")):
            lines += [
                f"  {name}:",
                f"    platform: {platform}",
                f"    accelerator: {accelerator}",
                "    backend: torch_xla",
            ]
            lines += [f"    torch: {q}", f'    torch_xla: "{xla}"', f"    python: {py}"]
    return "\n".join(lines) + "\n"


def experiment_names(scripts: tuple[str, ...]) -> dict[str, str]:
    """Experiment name -> script: its name's slug, ``run-<slug>`` where that is one of make's own targets."""
    from envkit.project.experiments import MAKE_TARGET_PREFIXES, MAKE_TARGETS

    names = {}
    for script in scripts:
        slug = re.sub(r"[^a-z0-9]+", "-", Path(script).stem.lower()).strip("-")
        name = f"run-{slug}" if slug in MAKE_TARGETS or slug.startswith(MAKE_TARGET_PREFIXES) else slug
        while name in names:  # Train.py and train.py
            name += "-2"
        names[name] = script
    return names

"""Render each target's docker/<target>/ files from templates/ with Jinja, in memory.

envkit.render.output writes them (all or nothing) or compares them with what is on disk.
"""

from __future__ import annotations

import os
from pathlib import Path

import jinja2
from jinja2.loaders import split_template_path

from envkit import DISTRIBUTION
from envkit.errors import EnvkitError
from envkit.lock.base_digest import split_reference
from envkit.lock.header import edited_header
from envkit.lock.inputs import TORCH_INDEX_PACKAGES, LockInputs, lock_inputs
from envkit.lock.lockfile import LOCK_FILE, LockFile, hand_edited, lock_path, read_lock
from envkit.project import kinds
from envkit.project.config import ProjectConfig, Target
from envkit.project.requirement import requirement_name
from envkit.render.labels import BASE_DIGEST_LABEL, LOCK_LABEL
from envkit.render.output import RenderedFile
from envkit.render.template_cache import template_cache
from envkit.support import provenance_records
from envkit.support.bounded_load import Refused, note, read_text
from envkit.support.packaged import packaged_templates
from envkit.support.provenance_records import RESULTS_FOLDER
from envkit.support.shellquote import FILTERS

# Target file -> (template, file mode); {kind} is the target's kind.
FILES = {
    "Dockerfile": ("Dockerfile.j2", 0o644),
    "run.sh": ("kinds/{kind}.run.sh.j2", 0o755),
    ".dockerignore": ("dockerignore.j2", 0o644),
}
# What apt and dpkg leave behind that differs between two identical builds (logs,
# caches with timestamps, downloaded index files): removed in the layer that made them.
APT_LEFTOVERS = (
    "/var/lib/apt/lists/*",
    "/var/cache/apt/*.bin",
    "/var/log/apt/*",
    "/var/log/dpkg.log",
    "/var/log/alternatives.log",
    "/var/cache/ldconfig/aux-cache",
    "/var/cache/debconf/*-old",
)
# A high fixed id: numeric USER resolves on any host, and it cannot collide with
# the 1000 that some bases (ubuntu 24.04's "ubuntu") already use.
IMAGE_USER = {"name": "envkit", "id": 10001}


def render_targets(config: ProjectConfig, names: list[str], locks: Path | None = None) -> list[RenderedFile]:
    """The files of each target; ``locks`` holds <target>/requirements.lock (default: the config's image folder)."""
    env = template_environment(config.root)
    files = []
    for name in names:
        target = config.target(name)
        if target.is_notebook:
            raise EnvkitError(f"target {name} is a notebook target: it has no image files (envkit notebook renders it)")
        lock_file = (locks / name / LOCK_FILE) if locks is not None else lock_path(config, name)
        inputs = lock_inputs(target)
        context = _context(config, target, _current_lock(target, inputs, lock_file), inputs)
        for filename, (template, mode) in FILES.items():
            text = render_template(env, template.format(kind=target.kind), context)
            files.append(RenderedFile(Path(name) / filename, text, mode))
        # The run wrapper every command in the image starts through (standard library only: the image has no envkit),
        # its files together.
        files += [
            RenderedFile(Path(name) / file, read_text(path), 0o644)
            for file, path in provenance_records.shipped().items()
        ]
    return files


def template_dirs(root: Path) -> list[Path]:
    """Where templates are looked up for the project at ``root``: its own templates/, file by file and only
    where it exists, before envkit's."""
    own = root / "templates"
    note(own)  # a templates/ folder appearing is a change to the render memo
    packaged = packaged_templates()
    return [own, packaged] if own.is_dir() and own.resolve() != packaged.resolve() else [packaged]


def template_environment(root: Path) -> jinja2.Environment:
    """Jinja over the project's templates/ and then envkit's own (a project overrides them file by file)."""
    directories = template_dirs(root)
    if not directories[-1].is_dir():
        raise EnvkitError(f"envkit's templates are missing at {directories[-1]}: reinstall envkit ({DISTRIBUTION})")
    env = jinja2.Environment(
        loader=_BoundedLoader([str(directory) for directory in directories]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(FILTERS)
    env.bytecode_cache = template_cache(env)
    return env


class _BoundedLoader(jinja2.FileSystemLoader):
    """Jinja's loader reading each template through the bounded reader: templates are the
    project's files, and an unreadable, huge or special one is one line, not a traceback."""

    def get_source(self, environment: jinja2.Environment, template: str):
        # the first directory that has the file (a project's own templates/ before envkit's); a dangling
        # symlink there is the project's file too, and fails to read rather than falling through
        candidates = [Path(directory, *split_template_path(template)) for directory in self.searchpath]
        for path in candidates:
            note(path)  # looked for: an override appearing where there was none is a change (envkit.render.memo)
            if os.path.lexists(path):
                break
        try:
            source, mtime = read_text(path), path.stat().st_mtime_ns
        except (FileNotFoundError, NotADirectoryError):
            raise jinja2.TemplateNotFound(template) from None
        except OSError as exc:
            raise EnvkitError(f"{path}: cannot read: {exc.strerror or exc}") from None
        except Refused as exc:
            raise EnvkitError(exc.at(path)) from None

        def uptodate() -> bool:
            try:
                return path.stat().st_mtime_ns == mtime
            except OSError:
                return False

        return source, str(path), uptodate


def render_template(env: jinja2.Environment, template: str, context: dict) -> str:
    try:
        return env.get_template(template).render(context)
    except jinja2.TemplateNotFound as exc:
        raise EnvkitError(f"template {exc.name} not found in {env.loader.searchpath[0]}") from None
    except (jinja2.TemplateError, ValueError) as exc:
        raise EnvkitError(f"cannot render {template}: {' '.join(str(exc).split())}") from None


def _current_lock(target: Target, inputs: LockInputs, path: Path) -> LockFile | None:
    """The target's lock, or None when it has none; a lock of other inputs is refused."""
    lock = read_lock(path)
    if lock is not None and lock.inputs_sha256 != inputs.digest():
        raise EnvkitError(
            f"target {target.name}: {path} was resolved from other inputs than envkit.yaml now gives: "
            f"run `envkit lock --target {target.name}` (or delete the lock to build the target unlocked)"
        )
    if lock is not None and (edited := hand_edited(lock) or edited_header(lock, inputs, target.platforms)):
        raise EnvkitError(f"target {target.name}: {path}: {edited}; run `envkit lock --target {target.name}`")
    return lock


def labels(config: ProjectConfig, target: Target, lock: LockFile | None) -> list[tuple[str, str]]:
    pairs = {
        "org.opencontainers.image.title": f"envkit-{target.name}",
        "org.opencontainers.image.description": f"envkit {target.kind} image: torch {target.torch}",
        "io.envkit.target": target.name,
        "io.envkit.kind": target.kind,
        "io.envkit.config-hash": target.config_hash,
        # What `envkit build --platform` may build it for; a native build on another engine is refused.
        "io.envkit.platforms": " ".join(target.platforms),
    }
    if target.backend:
        pairs["io.envkit.backend"] = target.backend
    if lock is None:
        pairs["io.envkit.lock"] = "unlocked"
    else:
        pairs[LOCK_LABEL] = lock.sha256
    if config.source:
        pairs["org.opencontainers.image.source"] = config.source
    pairs.update({f"io.envkit.pin.{name}": version for name, version in target.pins().items()})
    return sorted(pairs.items())


def base_reference(target: Target, lock: LockFile | None) -> tuple[str, str | None]:
    """(what FROM names, the base's digest or None): a configured digest, else the lock's."""
    reference, digest = split_reference(target.base_image)
    if digest is None and lock is not None and lock.base_image:
        locked, locked_digest = split_reference(lock.base_image.split(" ", 1)[0])
        if locked == reference:
            digest = locked_digest
    return (f"{reference}@{digest}" if digest else reference), digest


def torch_find_links(target: Target, inputs: LockInputs, mirror: str | None = None) -> list[str]:
    """PyTorch's project pages for torch/torchvision (on ``mirror`` if given): locked or not, each package has one
    index, never an extra one."""
    torch_index = inputs.torch_index_for(mirror)
    if torch_index is None:
        return []
    return project_pages(torch_index, ["torch", *(["torchvision"] if target.torchvision else [])])


def project_pages(torch_index: str, requirements: list[str]) -> list[str]:
    """The pages on PyTorch's index of the torch-index packages among ``requirements`` (names or pins)."""
    wanted = {requirement_name(r) for r in requirements}
    return [f"{torch_index.rstrip('/')}/{name}/" for name in TORCH_INDEX_PACKAGES if name in wanted]


def apt_snapshot(target: Target) -> dict | None:
    """How apt reaches the snapshot archive as of ``apt_snapshot``: Ubuntu has it built in, Debian by sources."""
    if target.apt_snapshot is None:
        return None
    distro = "ubuntu" if "ubuntu" in split_reference(target.base_image)[0] else "debian"
    return {"distro": distro, "timestamp": target.apt_snapshot}


def run_env(kind: kinds.Kind, target: Target) -> dict[str, str]:
    """What run.sh and a notebook tell the program: the kind's variables, the target's own env over them (the
    Dockerfile's ENV holds it too; passed again, so that nothing run.sh passes overrides it)."""
    # PJRT_DEVICE selects torch_xla's device; TorchTPU finds its chips without it.
    dropped = ("PJRT_DEVICE",) if target.backend == "torch_tpu" else ()
    return {**{name: value for name, value in kind.run.env.items() if name not in dropped}, **target.env}


def _context(config: ProjectConfig, target: Target, lock: LockFile | None, inputs: LockInputs) -> dict:
    kind = kinds.kind(target.kind)
    base, base_digest = base_reference(target, lock)
    return {
        "config_name": config.path.name,
        "target": target,
        "kind": kind,
        "run_env": run_env(kind, target),
        "gpu_indices": kinds.gpu_indices(),  # GPUS's syntax (cuda's run.sh checks it)
        "results_folder": RESULTS_FOLDER,  # run.sh's RESULTS_DIR default
        "docker_args": [*kind.run.docker_args, *(["--net=host"] if kind.run.host_network else [])],
        "ulimits": " ".join(f"{name}={value}" for name, value in kind.run.ulimits.items()),
        "labels": labels(config, target, lock),
        "requirements": target.requirements(),
        "lock": lock,
        "lock_file": LOCK_FILE,
        "wrapper_files": list(
            provenance_records.shipped()
        ),  # envkit_run.py and its modules, staged beside the Dockerfile
        "torch_find_links": torch_find_links(target, inputs),
        "base_image": base,
        "base_digest": base_digest or "",
        "base_digest_label": BASE_DIGEST_LABEL,
        "apt_snapshot": apt_snapshot(target),
        "apt_leftovers": " ".join(APT_LEFTOVERS),
        # Root only where the kind's devices need it (--privileged on a TPU VM).
        "user": IMAGE_USER if kind.run.user == "caller" else None,
        # torch_xla's _XLAC links the shared libpython (pytorch/xla#6372), which a
        # distro python3 base lacks: the Dockerfile installs this package there.
        "libpython": f"libpython{target.python}" if target.torch_xla else None,
        "image": f"envkit-{target.name}:latest",
    }

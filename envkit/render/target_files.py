"""Render docker/<target>/ files from templates/ (design.md section 3).

Everything is rendered in memory first; files are then written all or nothing
(every changed file staged by envkit.support.atomic before any replaces its destination),
so a failure never leaves a half-written tree behind.
"""

from __future__ import annotations

import difflib
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import jinja2

from envkit.project import kinds
from envkit.support.atomic import atomic_stream
from envkit.lock.base_digest import split_reference
from envkit.project.config import ProjectConfig, Target
from envkit.errors import EnvkitError
from envkit.render.labels import BASE_DIGEST_LABEL, LOCK_LABEL
from envkit.lock.lockfile import LOCK_FILE, TORCH_INDEX_PACKAGES, LockFile, lock_inputs, lock_path, read_lock
from envkit.support.shellquote import FILTERS
from envkit.render.template_cache import template_cache

DEFAULT_OUTPUT = Path("docker")
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


@dataclass(frozen=True)
class RenderedFile:
    path: Path  # relative to the output directory: <target>/<file>
    text: str
    mode: int


def render(config: ProjectConfig, names: list[str], locks: Path | None = None) -> list[RenderedFile]:
    """The files of each target; ``locks`` holds <target>/requirements.lock (default: docker/ beside the config)."""
    env = template_environment(config.root / "templates")
    files = []
    for name in names:
        target = config.target(name)
        if target.is_notebook:
            raise EnvkitError(f"target {name} is a notebook target: it has no docker/ files (envkit notebook renders it)")
        lock_file = (locks / name / LOCK_FILE) if locks is not None else lock_path(config, name)
        context = _context(config, target, _current_lock(target, lock_file))
        for filename, (template, mode) in FILES.items():
            text = render_template(env, template.format(kind=target.kind), context)
            files.append(RenderedFile(Path(name) / filename, text, mode))
    return files


def template_environment(templates: Path) -> jinja2.Environment:
    if not templates.is_dir():
        raise EnvkitError(f"templates directory {templates} not found; it must sit beside the config file")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(FILTERS)
    env.bytecode_cache = template_cache(env)
    return env


def render_template(env: jinja2.Environment, template: str, context: dict) -> str:
    try:
        return env.get_template(template).render(context)
    except jinja2.TemplateNotFound as exc:
        raise EnvkitError(f"template {exc.name} not found in {env.loader.searchpath[0]}") from None
    except (jinja2.TemplateError, ValueError) as exc:
        raise EnvkitError(f"cannot render {template}: {' '.join(str(exc).split())}") from None


def requirements(target: Target) -> list[str]:
    """pip requirements in install order: the matrix pins first, then the target's own."""
    local = f"+{target.torch_variant}" if target.torch_variant else ""
    pinned = [f"torch=={target.torch}{local}"]
    if target.torch_xla:
        pinned.append(f"torch_xla[tpu]=={target.torch_xla}")
        pinned.append(f"{target.libtpu_package}=={target.libtpu}")
    if target.torch_tpu:
        pinned.append(f"torch-tpu=={target.torch_tpu}")
        pinned.append(f"{target.libtpu_package}=={target.libtpu}")
    if target.torchvision:
        pinned.append(f"torchvision=={target.torchvision}{local}")
    return pinned + list(target.pip_packages)


def _current_lock(target: Target, path: Path) -> LockFile | None:
    """The target's lock, or None when it has none; a lock of other inputs is refused."""
    lock = read_lock(path) if path.is_file() else None
    if lock is not None and lock.inputs_sha256 != lock_inputs(target).digest():
        raise EnvkitError(
            f"target {target.name}: {path} was resolved from other inputs than envkit.yaml now gives: "
            f"run `envkit lock --target {target.name}` (or delete the lock to build the target unlocked)"
        )
    return lock


def labels(config: ProjectConfig, target: Target, lock: LockFile | None) -> list[tuple[str, str]]:
    pairs = {
        "org.opencontainers.image.title": f"envkit-{target.name}",
        "org.opencontainers.image.description": f"envkit {target.kind} image: torch {target.torch}",
        "io.envkit.target": target.name,
        "io.envkit.kind": target.kind,
        "io.envkit.config-hash": target.config_hash,
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


def torch_find_links(target: Target, lock: LockFile | None) -> list[str]:
    """PyTorch's project pages for torch/torchvision: a locked install names one index, never an extra one."""
    torch_index = lock_inputs(target).torch_index if lock is not None else None
    if torch_index is None:
        return []
    return [f"{torch_index.rstrip('/')}/{name}/" for name in TORCH_INDEX_PACKAGES if name in lock.packages]


def apt_snapshot(target: Target) -> dict | None:
    """How apt reaches the snapshot archive as of ``apt_snapshot``: Ubuntu has it built in, Debian by sources."""
    if target.apt_snapshot is None:
        return None
    distro = "ubuntu" if "ubuntu" in split_reference(target.base_image)[0] else "debian"
    return {"distro": distro, "timestamp": target.apt_snapshot}


def run_env(kind: kinds.Kind, target: Target) -> dict[str, str]:
    # PJRT_DEVICE selects torch_xla's device; TorchTPU finds its chips without it.
    if target.backend == "torch_tpu":
        return {name: value for name, value in kind.run.env.items() if name != "PJRT_DEVICE"}
    return dict(kind.run.env)


def _context(config: ProjectConfig, target: Target, lock: LockFile | None) -> dict:
    kind = kinds.kind(target.kind)
    base, base_digest = base_reference(target, lock)
    return {
        "config_name": config.path.name,
        "target": target,
        "kind": kind,
        "run_env": run_env(kind, target),
        "docker_args": [*kind.run.docker_args, *(["--net=host"] if kind.run.host_network else [])],
        "ulimits": " ".join(f"{name}={value}" for name, value in kind.run.ulimits.items()),
        "labels": labels(config, target, lock),
        "requirements": requirements(target),
        "lock": lock,
        "lock_file": LOCK_FILE,
        "torch_find_links": torch_find_links(target, lock),
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


def write(output: Path, files: list[RenderedFile]) -> list[Path]:
    """Write every changed file or none: stage temp files, then rename them into place.

    Unchanged files are left alone so that their timestamps do not make `make`
    rebuild images. Returns the paths written.
    """
    if output.exists() and not output.is_dir():
        raise EnvkitError(f"output path {output} is a file; pass --output DIR with a directory")
    created: list[Path] = []
    written: list[Path] = []
    try:
        # Every changed file is staged before the first one replaces its destination.
        with ExitStack() as staged:
            for file in files:
                destination = output / file.path
                if _difference(destination, file) is None:
                    continue
                if destination.is_dir():
                    raise IsADirectoryError(21, "a directory is in the way", str(destination))
                _make_dirs(destination.parent, created)
                staged.enter_context(atomic_stream(destination, mode=file.mode)).write(file.text.encode("utf-8"))
                written.append(destination)
    except OSError as exc:
        for directory in reversed(created):
            _remove_if_empty(directory)
        reason = exc.strerror or str(exc)
        raise EnvkitError(f"cannot write to {exc.filename or output}: {reason}; choose a writable --output DIR") from None
    return written


def _make_dirs(directory: Path, created: list[Path]) -> None:
    missing = []
    for parent in [directory, *directory.parents]:
        if parent.is_dir():
            break
        missing.append(parent)
    for parent in reversed(missing):
        if parent.exists() and not parent.is_dir():
            raise NotADirectoryError(20, "exists and is not a directory", str(parent))
        parent.mkdir()
        created.append(parent)


def _remove_if_empty(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:
        pass


def stale(output: Path, files: list[RenderedFile]) -> list[str]:
    """One line per committed file that differs from a fresh render."""
    problems = (_difference(output / file.path, file) for file in files)
    return [f"{output / file.path}: {problem}" for file, problem in zip(files, problems) if problem]


def _difference(path: Path, file: RenderedFile) -> str | None:
    """How the file on disk differs from the rendered one, or None when it does not."""
    try:
        current = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except (OSError, UnicodeDecodeError) as exc:
        return f"unreadable ({exc})"
    if current != file.text:
        changed = sum(
            1
            for line in difflib.unified_diff(current.splitlines(), file.text.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        )
        return f"stale ({changed} changed lines)"
    if _executable(path.stat().st_mode) != _executable(file.mode):
        # Only the executable bit: git records nothing else, and umasks differ.
        return f"{'should' if _executable(file.mode) else 'should not'} be executable"
    return None


def orphans(output: Path, names: list[str]) -> list[str]:
    """Rendered target directories left behind by targets no longer in the config."""
    if not output.is_dir():
        return []
    leftovers = sorted(
        child for child in output.iterdir() if child.is_dir() and child.name not in names and (child / "Dockerfile").is_file()
    )
    return [f"{child}: not a target in the config (remove it)" for child in leftovers]


def _executable(mode: int) -> bool:
    return bool(mode & 0o111)

"""Which torch wheels a target takes, and what follows from them: one resolver per rule, each returning a Wheels.

The rules are kinds.yaml's `wheels` (cpu, cuda, torch_xla: the TPU VM, whose backend picks torch_xla or torch_tpu)
and a notebook's CUDA, which installs the default index's build into the platform's runtime. Each resolver checks
its own keys against the matrix and fails with one line naming the field.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from envkit.errors import EnvkitError
from envkit.project.matrix import Matrix, TorchRelease, minor_of, python_in_range, version_key

if TYPE_CHECKING:
    from envkit.project import notebook_platforms

# Keys that belong to one TPU backend only.
BACKEND_ONLY_KEYS = {"torch_xla": ("torch_xla",), "torch_tpu": ("torch_tpu",)}


class Ask(NamedTuple):
    """What every resolver reads: the target's keys, the matrix and its torch release, and where errors point."""

    raw: dict[str, Any]
    matrix: Matrix
    release: TorchRelease
    runtime: "notebook_platforms.Runtime | None"  # a notebook target's platform runtime
    default_python: str  # an image's, when nothing else decides it
    where: Callable[..., str]  # where(key) -> "file:line: targets.<name>.<key>"; where() the target itself

    @property
    def torch(self) -> str:
        return self.raw["torch"]


class Wheels(NamedTuple):
    python_range: tuple[str, str]  # the Pythons every pinned wheel supports
    default_python: str
    torch_variant: str | None  # the wheel's local tag; None for the default index's own build
    default_base: str | None = None  # None: the kind's python base image (or a notebook's runtime)
    cuda: str | None = None
    backend: str | None = None
    torch_xla: str | None = None
    torch_tpu: str | None = None
    libtpu: str | None = None
    libtpu_package: str | None = None
    find_links: tuple[str, ...] = ()  # project pages the backend's packages need


def resolve(rule: str, ask: Ask) -> Wheels:
    """The wheels of a target whose kind takes wheels by ``rule``."""
    if ask.runtime is not None and rule == "cuda":
        return notebook_cuda(ask)
    if rule == "cpu":
        return cpu(ask)
    if rule == "cuda":
        return cuda(ask)
    # The TPU VM (rule torch_xla): its backend decides, torch_xla's pair or torch_tpu's release.
    backend = ask.raw.get("backend") or ask.matrix.default_tpu_backend(ask.where("torch"), ask.torch)
    for other_backend, keys in BACKEND_ONLY_KEYS.items():
        for key in keys:
            if key in ask.raw and backend != other_backend:
                raise EnvkitError(f"{ask.where(key)}: {key!r} applies to backend {other_backend} only, not {backend}")
    return torch_xla(ask) if backend == "torch_xla" else torch_tpu(ask)


def notebook_cuda(ask: Ask) -> Wheels:
    """A notebook installs no CUDA toolkit of its own: torch is the default index's build, whose wheels bundle
    the CUDA libraries of the release's pypi_cuda variant (the lock names them)."""
    if ask.release.pypi_cuda is None:
        raise EnvkitError(
            f"{ask.where('torch')}: torch {ask.torch} has no CUDA build on the default index, "
            f"which a notebook target installs from; choose a torch release that has one (envkit matrix)"
        )
    cuda_version = ask.matrix.cuda[ask.release.pypi_cuda].cuda
    return Wheels(ask.release.python, ask.runtime.python_minor, None, cuda=cuda_version)


def cpu(ask: Ask) -> Wheels:
    return Wheels(ask.release.python, ask.default_python, ask.matrix.cpu_local_version)


def cuda(ask: Ask) -> Wheels:
    variant = ask.matrix.cuda_variant(ask.where("cuda"), ask.release, ask.raw.get("cuda"))
    # The default index's own torch is this variant's build: no local tag, no second index.
    local = None if variant.variant == ask.release.pypi_cuda else variant.variant
    return Wheels(ask.release.python, variant.python, local, default_base=variant.base_image, cuda=variant.cuda)


def torch_xla(ask: Ask) -> Wheels:
    if minor_of(ask.torch) not in ask.matrix.torch_xla:
        raise EnvkitError(
            f"{ask.where('backend')}: backend torch_xla does not support torch {ask.torch}; "
            f"{ask.matrix.backend_ranges()}"
        )
    tpu, xla = ask.matrix.xla_pair(
        ask.where("torch_xla" if "torch_xla" in ask.raw else "torch"), ask.torch, ask.raw.get("torch_xla")
    )
    libtpu = ask.raw.get("libtpu", tpu.libtpu)
    if libtpu != tpu.libtpu:
        raise EnvkitError(
            f"{ask.where('libtpu')}: libtpu {libtpu} is not the build tested with torch_xla {tpu.minor}; "
            f"valid choice: {tpu.libtpu}"
        )
    return Wheels(
        _backend_pythons(ask, tpu.python, f"torch_xla {xla}"),
        _tpu_default_python(ask),
        None,
        backend="torch_xla",
        torch_xla=xla,
        libtpu=libtpu,
        libtpu_package=tpu.libtpu_package,
        find_links=tuple(tpu.find_links),
    )


def torch_tpu(ask: Ask) -> Wheels:
    field_at = ask.where(next((key for key in ("torch_tpu", "backend") if key in ask.raw), "torch"))
    if not ask.matrix.torch_tpu:
        raise EnvkitError(f"{field_at}: envkit's matrix lists no torch_tpu release")
    release = ask.matrix.torch_tpu_release(field_at, ask.torch, ask.raw.get("torch_tpu"))
    libtpu = ask.raw.get("libtpu", release.libtpu)
    if version_key(libtpu) < version_key(release.libtpu):
        raise EnvkitError(
            f"{ask.where('libtpu')}: libtpu {libtpu} is older than torch_tpu {release.version} accepts; "
            f"valid choices: {release.libtpu} or newer"
        )
    return Wheels(
        _backend_pythons(ask, release.python, f"torch_tpu {release.version}"),
        _tpu_default_python(ask),
        # torch_tpu brings the device: PyTorch's CPU build is all torch needs to be.
        ask.matrix.cpu_local_version,
        backend="torch_tpu",
        torch_tpu=release.version,
        libtpu=libtpu,
        libtpu_package="libtpu",
    )


def _tpu_default_python(ask: Ask) -> str:
    return ask.runtime.python_minor if ask.runtime is not None else ask.default_python


def _backend_pythons(ask: Ask, backend_range: tuple[str, str], owner: str) -> tuple[str, str]:
    """The backend's Python range, checked first (its message names the backend), then met with torch's:
    the image runs torch as well as the backend."""
    python = ask.raw.get("python", _tpu_default_python(ask))
    if not python_in_range(python, backend_range):
        raise EnvkitError(
            f"{ask.where('python') if 'python' in ask.raw else ask.where()}: Python {python} is "
            f"outside {owner}'s supported range {backend_range[0]}-{backend_range[1]}"
        )
    torch_range = ask.release.python
    return max(backend_range[0], torch_range[0], key=version_key), min(
        backend_range[1], torch_range[1], key=version_key
    )

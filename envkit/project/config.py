"""A loaded project config as frozen data: its targets (Target) and the project around them (ProjectConfig).

envkit.project.load.load_config builds them from envkit.yaml (design.md section 1).
"""

from pathlib import Path
from typing import NamedTuple

from envkit.errors import EnvkitError
from envkit.project.experiments import Experiment, load_experiments
from envkit.project.files import DEFAULT_LIMIT_MB
from envkit.project.output import DEFAULT_OUTPUT, Output

DEFAULT_PYTHON = "3.11"


# envkit's records are NamedTuples, not frozen dataclasses: every command builds their classes at import, where a
# frozen dataclass costs about 0.7 ms each (issue 42; tests/render/test_memo.py counts them).
class Target(NamedTuple):
    """One target of envkit.yaml, resolved against the matrix: what its image or notebook is made of."""

    name: str
    kind: str  # a kind of envkit/data/kinds.yaml
    base_image: str | None  # None for a notebook target: it runs in the platform's runtime
    python: str  # major.minor
    torch: str
    torchvision: str | None  # None: opted out
    backend: str | None  # tpu-vm: "torch_xla" | "torch_tpu"
    torch_xla: str | None  # tpu-vm, torch_xla backend
    torch_tpu: str | None  # tpu-vm, torch_tpu backend: the torch-tpu release
    libtpu: str | None  # tpu-vm
    libtpu_package: str | None  # "libtpu" or, before torch 2.6, "libtpu-nightly"
    cuda: str | None  # cuda: toolkit version, "12.6"
    torch_variant: str | None  # wheel local version tag: "cpu", "cu126"; None for PyPI's default build
    pip_index_url: str | None
    find_links: tuple[str, ...]
    apt_packages: tuple[str, ...]
    pip_packages: tuple[str, ...]  # extra requirements, after the recipe defaults
    env: dict[str, str]
    ca_certificates: tuple[Path, ...]  # absolute
    shm_size: str | None  # None: share the host IPC namespace instead
    gpus: str | None  # cuda: "all" or "0,2"
    apt_snapshot: str | None = None  # YYYYMMDDTHHMMSSZ: apt from the snapshot archive as of then
    # Notebook targets (envkit/data/notebook_platforms.yaml): where the notebook runs, and the
    # experiments whose notebooks are committed under notebooks/.
    platform: str | None = None
    accelerator: str | None = None
    notebooks: tuple[str, ...] = ()
    # The image platforms it builds for (docker's names: linux/amd64, linux/arm64); none for a notebook target.
    platforms: tuple[str, ...] = ()
    # Why `envkit lock --check` may pass while the target has no lock (unlocked: {allowed: REASON}), or None.
    unlocked_allowed: str | None = None
    config_hash: str = ""

    @property
    def is_notebook(self) -> bool:
        return self.platform is not None

    def pins(self) -> dict[str, str]:
        """Pinned versions, for labels, image tags and manifests."""
        pins = {"python": self.python, "torch": self.torch}
        optional = {
            "torchvision": self.torchvision,
            "torch_xla": self.torch_xla,
            "torch_tpu": self.torch_tpu,
            "libtpu": self.libtpu,
            "cuda": self.cuda,
        }
        pins.update({name: value for name, value in optional.items() if value is not None})
        return dict(sorted(pins.items()))

    def requirements(self) -> list[str]:
        """pip requirements in install order: the matrix pins first, then the target's own.

        What the Dockerfile installs when the target is unlocked, and what ``envkit lock`` resolves.
        """
        local = f"+{self.torch_variant}" if self.torch_variant else ""
        pinned = [f"torch=={self.torch}{local}"]
        if self.torch_xla:
            pinned.append(f"torch_xla[tpu]=={self.torch_xla}")
            pinned.append(f"{self.libtpu_package}=={self.libtpu}")
        if self.torch_tpu:
            pinned.append(f"torch-tpu=={self.torch_tpu}")
            pinned.append(f"{self.libtpu_package}=={self.libtpu}")
        if self.torchvision:
            pinned.append(f"torchvision=={self.torchvision}{local}")
        return pinned + list(self.pip_packages)


class ProjectConfig(NamedTuple):
    """envkit.yaml loaded: its targets and the project's settings."""

    path: Path
    root: Path
    source: str | None
    targets: dict[str, Target]
    files_limit_mb: int = DEFAULT_LIMIT_MB  # the project's files in an image or a notebook (envkit.project.files)
    include_secrets: tuple[str, ...] = ()  # files that look like secrets the project carries all the same
    output: Output = DEFAULT_OUTPUT  # the folders envkit writes: envkit.yaml's output

    @property
    def images(self) -> dict[str, Target]:
        """The image targets (<output.images>/<target>/): every target but the notebook targets."""
        return {name: target for name, target in self.targets.items() if not target.is_notebook}

    @property
    def experiments(self) -> dict[str, Experiment]:
        """The project's experiments (envkit.yaml's experiments, or the file it names)."""
        return load_experiments(self.path)

    def target(self, name: str) -> Target:
        if name not in self.targets:
            raise EnvkitError(f"unknown target {name!r}; targets in {self.path}: {', '.join(self.targets)}")
        return self.targets[name]

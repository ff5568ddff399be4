"""The compatibility matrix (envkit/data/matrix.yaml) and the questions asked of it.

Every lookup either returns a listed combination or raises one EnvkitError line
that names the field and the valid choices: a variant is never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from envkit.errors import EnvkitError

MATRIX_PATH = Path(__file__).resolve().parent / "data" / "matrix.yaml"


@dataclass(frozen=True)
class CudaVariant:
    variant: str  # wheel local version tag, e.g. "cu126"
    cuda: str  # toolkit version, e.g. "12.6"
    index_url: str  # PyTorch's index for this variant's wheels
    base_image: str
    python: str  # the base image's python3


@dataclass(frozen=True)
class TorchRelease:
    minor: str  # "2.9"
    torchvision: str  # minor release of torchvision, "0.24"
    python: tuple[str, str]  # oldest, newest
    cuda_variants: tuple[str, ...]  # first is the default


@dataclass(frozen=True)
class TpuRelease:
    minor: str
    libtpu_package: str
    libtpu: str
    python: tuple[str, str]
    find_links: tuple[str, ...]


@dataclass(frozen=True)
class Matrix:
    recipe_packages: tuple[str, ...]
    torch: dict[str, TorchRelease]
    cpu_index_url: str
    cpu_local_version: str
    cuda: dict[str, CudaVariant]
    tpu: dict[str, TpuRelease]

    def torch_release(self, field: str, version: str) -> TorchRelease:
        release = self.torch.get(minor_of(version))
        if release is None:
            raise EnvkitError(f"{field}: torch {version} is not in envkit's matrix; supported: {_releases(self.torch)}")
        return release

    def cuda_variant(self, field: str, release: TorchRelease, cuda: str | None) -> CudaVariant:
        if not release.cuda_variants:
            with_cuda = [minor for minor, rel in self.torch.items() if rel.cuda_variants]
            raise EnvkitError(
                f"{field}: torch {release.minor} has no CUDA wheel variant in envkit's matrix; "
                f"torch releases with CUDA variants: {_join_minors(with_cuda)}"
            )
        if cuda is None:
            return self.cuda[release.cuda_variants[0]]
        for variant in release.cuda_variants:
            if self.cuda[variant].cuda == cuda:
                return self.cuda[variant]
        valid = ", ".join(self.cuda[v].cuda for v in release.cuda_variants)
        raise EnvkitError(f"{field}: CUDA {cuda} has no torch {release.minor} wheels; valid choices: {valid}")

    def tpu_release(self, field: str, version: str) -> TpuRelease:
        release = self.tpu.get(minor_of(version))
        if release is None:
            raise EnvkitError(
                f"{field}: torch {version} has no torch_xla release in envkit's matrix; supported: {_releases(self.tpu)}"
            )
        return release


def minor_of(version: str) -> str:
    return ".".join(version.split(".")[:2])


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def python_in_range(python: str, supported: tuple[str, str]) -> bool:
    return version_key(supported[0]) <= version_key(python) <= version_key(supported[1])


def _releases(table: dict) -> str:
    return _join_minors(list(table))


def _join_minors(minors: list[str]) -> str:
    return ", ".join(f"{minor}.x" for minor in sorted(minors, key=version_key))


@lru_cache(maxsize=1)
def load_matrix(path: Path = MATRIX_PATH) -> Matrix:
    with open(path, encoding="utf-8") as handle:
        raw = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    torch = {
        minor: TorchRelease(minor, row["torchvision"], tuple(row["python"]), tuple(row["cuda"]))
        for minor, row in raw["torch"].items()
    }
    cuda = {
        variant: CudaVariant(variant, row["cuda"], row["index_url"], row["base_image"], row["python"])
        for variant, row in raw["cuda"].items()
    }
    tpu = {
        minor: TpuRelease(
            minor,
            row["libtpu"]["package"],
            row["libtpu"]["version"],
            tuple(row["python"]),
            tuple(row["find_links"]),
        )
        for minor, row in raw["tpu"]["releases"].items()
    }
    return Matrix(
        recipe_packages=tuple(raw["recipe_packages"]),
        torch=torch,
        cpu_index_url=raw["cpu"]["index_url"],
        cpu_local_version=raw["cpu"]["local_version"],
        cuda=cuda,
        tpu=tpu,
    )

"""The compatibility matrix (envkit/data/matrix.yaml) and the questions asked of it.

Every lookup either returns a listed combination or raises one EnvkitError line
that names the field and the valid choices: a variant is never guessed.
"""

from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from envkit.errors import EnvkitError
from envkit.project.datafile import DATA_DIR, load_table

MATRIX_PATH = DATA_DIR / "matrix.yaml"
TPU_BACKENDS = ("torch_xla", "torch_tpu")


class CudaVariant(NamedTuple):
    variant: str  # wheel local version tag, e.g. "cu126"
    cuda: str  # toolkit version, e.g. "12.6"
    index_url: str  # PyTorch's index for this variant's wheels
    base_image: str
    python: str  # the base image's python3
    source: str


class TorchRelease(NamedTuple):
    minor: str  # "2.9"
    versions: tuple[str, ...]  # every release of the minor: "2.9.0", "2.9.1"
    torchvision: str | None  # minor release of torchvision, "0.24"; None: none exists yet
    torchvision_missing: str | None  # why there is none
    python: tuple[str, str]  # oldest, newest
    cuda_variants: tuple[str, ...]  # on PyTorch's own index
    cuda_source: str
    pypi_cuda: str | None = None  # the variant of the default index's own torch wheel

    def cuda_choices(self) -> tuple[str, ...]:
        """Every CUDA variant a target may name: the default index's first (the default), then PyTorch's."""
        return tuple(dict.fromkeys([*([self.pypi_cuda] if self.pypi_cuda else []), *self.cuda_variants]))


class XlaRelease(NamedTuple):
    minor: str
    pairs: tuple[tuple[str, str], ...]  # (torch, torch_xla)
    libtpu_package: str
    libtpu: str
    python: tuple[str, str]
    find_links: tuple[str, ...]


class TorchTpuRelease(NamedTuple):
    version: str
    torch: tuple[str, str]  # oldest, newest torch release it supports
    libtpu: str  # the oldest libtpu it accepts
    python: tuple[str, str]


class Matrix(NamedTuple):
    recipe_packages: tuple[str, ...]
    torch: dict[str, TorchRelease]
    cpu_index_url: str
    cpu_local_version: str
    cuda: dict[str, CudaVariant]
    torch_xla: dict[str, XlaRelease]
    torch_tpu: dict[str, TorchTpuRelease]
    pypi_cuda_source: str = ""

    def torch_release(self, field: str, version: str) -> TorchRelease:
        release = self.torch.get(minor_of(version))
        if release is None:
            raise EnvkitError(f"{field}: torch {version} is not in envkit's matrix; supported: {_releases(self.torch)}")
        if version not in release.versions:
            raise EnvkitError(
                f"{field}: torch {version} was never released; releases of torch {release.minor}: "
                f"{', '.join(release.versions)}"
            )
        return release

    def cuda_variant(self, field: str, release: TorchRelease, cuda: str | None) -> CudaVariant:
        """The named CUDA variant, or by default the one the default index's torch is built for."""
        choices = release.cuda_choices()
        if not choices:
            with_cuda = [minor for minor, rel in self.torch.items() if rel.cuda_choices()]
            raise EnvkitError(
                f"{field}: torch {release.minor} has no CUDA wheel variant in envkit's matrix; "
                f"torch releases with CUDA variants: {_join_minors(with_cuda)}"
            )
        if cuda is None:
            return self.cuda[choices[0]]
        for variant in choices:
            if self.cuda[variant].cuda == cuda:
                return self.cuda[variant]
        valid = ", ".join(sorted((self.cuda[v].cuda for v in choices), key=version_key))
        raise EnvkitError(f"{field}: CUDA {cuda} has no torch {release.minor} wheels; valid choices: {valid}")

    def xla_pair(self, field: str, torch: str, torch_xla: str | None) -> tuple[XlaRelease, str]:
        """The torch_xla release for torch: the one named, or the last listed pair's."""
        for release in self.torch_xla.values():
            matches = [xla for pair_torch, xla in release.pairs if pair_torch == torch and torch_xla in (None, xla)]
            if matches:
                return release, matches[-1]
        same_minor = self.torch_xla.get(minor_of(torch_xla or torch))
        pairs = same_minor.pairs if same_minor else [pair for rel in self.torch_xla.values() for pair in rel.pairs]
        named = f"torch {torch} with torch_xla {torch_xla}" if torch_xla else f"torch {torch}"
        valid = ", ".join(f"torch {t} + torch_xla {x}" for t, x in pairs)
        raise EnvkitError(f"{field}: {named} is not a released torch_xla pair; valid pairs: {valid}")

    def torch_tpu_release(self, field: str, torch: str, version: str | None) -> TorchTpuRelease:
        """The torch-tpu release for torch: the one named, or the newest that supports torch."""
        if version is not None and version not in self.torch_tpu:
            raise EnvkitError(
                f"{field}: torch_tpu {version} is not in envkit's matrix; supported: {', '.join(self.torch_tpu)}"
            )
        candidates = (
            [self.torch_tpu[version]]
            if version
            else sorted(self.torch_tpu.values(), key=lambda r: version_key(r.version))
        )
        for release in reversed(candidates):
            if version_in_range(torch, release.torch):
                return release
        ranges = "; ".join(f"torch_tpu {r.version}: torch {r.torch[0]}-{r.torch[1]}" for r in candidates)
        raise EnvkitError(f"{field}: torch {torch} is outside every torch_tpu release's torch range ({ranges})")

    def default_tpu_backend(self, field: str, torch: str) -> str:
        """torch_xla for the torch minors it covers (the published E1 comparison's API), else torch_tpu."""
        if minor_of(torch) in self.torch_xla:
            return "torch_xla"
        if any(version_in_range(torch, release.torch) for release in self.torch_tpu.values()):
            return "torch_tpu"
        raise EnvkitError(f"{field}: torch {torch} has no TPU backend; {self.backend_ranges()}")

    def backend_ranges(self) -> str:
        xla = [pair[0] for release in self.torch_xla.values() for pair in release.pairs]
        tpu_low = min((r.torch[0] for r in self.torch_tpu.values()), key=version_key)
        tpu_high = max((r.torch[1] for r in self.torch_tpu.values()), key=version_key)
        return f"torch_xla needs torch {xla[0]}-{xla[-1]} (listed pairs), torch_tpu needs torch {tpu_low}-{tpu_high}"


def minor_of(version: str) -> str:
    return ".".join(version.split(".")[:2])


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def version_in_range(version: str, supported: tuple[str, str]) -> bool:
    return version_key(supported[0]) <= version_key(version) <= version_key(supported[1])


# Python ranges are compared the same way: "3.10" sorts after "3.9".
python_in_range = version_in_range


def _releases(table: dict) -> str:
    return _join_minors(list(table))


def _join_minors(minors: list[str]) -> str:
    return ", ".join(f"{minor}.x" for minor in sorted(minors, key=version_key))


@lru_cache(maxsize=1)
def load_matrix(path: Path = MATRIX_PATH) -> Matrix:
    raw = load_table(path)
    torch = {
        minor: TorchRelease(
            minor,
            tuple(row["versions"]),
            row["torchvision"],
            row.get("torchvision_missing"),
            tuple(row["python"]),
            tuple(row["cuda"]),
            row["cuda_source"],
            row.get("pypi_cuda"),
        )
        for minor, row in raw["torch"].items()
    }
    cuda = {
        variant: CudaVariant(variant, row["cuda"], row["index_url"], row["base_image"], row["python"], row["source"])
        for variant, row in raw["cuda"].items()
    }
    torch_xla = {
        minor: XlaRelease(
            minor,
            tuple(tuple(pair) for pair in row["pairs"]),
            row["libtpu"]["package"],
            row["libtpu"]["version"],
            tuple(row["python"]),
            tuple(row["find_links"]),
        )
        for minor, row in raw["tpu"]["torch_xla"].items()
    }
    torch_tpu = {
        version: TorchTpuRelease(version, tuple(row["torch"]), row["libtpu"], tuple(row["python"]))
        for version, row in raw["tpu"]["torch_tpu"].items()
    }
    return Matrix(
        recipe_packages=tuple(raw["recipe_packages"]),
        torch=torch,
        cpu_index_url=raw["cpu"]["index_url"],
        cpu_local_version=raw["cpu"]["local_version"],
        cuda=cuda,
        torch_xla=torch_xla,
        torch_tpu=torch_tpu,
        pypi_cuda_source=raw["pypi_cuda_source"],
    )

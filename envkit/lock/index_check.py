"""`envkit matrix --verify`: compare envkit/data/matrix.yaml with the package index pip uses.

Like cog's generated compatibility matrices, but the other way round: the matrix
stays hand-kept data (PyTorch's own CUDA indexes cannot be reached from every
machine), and this check asks the index whether every pinned torch /
torchvision / torch_xla / libtpu / torch-tpu version exists, whether their
Requires-Dist pins and Python wheel tags agree with the rows, and whether the
index has releases the matrix lacks. It reads only the standard simple API
(PEP 691 JSON) and wheel metadata (PEP 658, else HTTP range reads of the wheel's
zip directory), so a mirror works as well as the default index.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.parser import HeaderParser

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion

from envkit.errors import EnvkitError
from envkit.lock.lockfile import normalise
from envkit.project.matrix import Matrix, minor_of, version_key

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
TIMEOUT_S = 60
# The index could not be asked: not a disagreement, and not bad input either.
EXIT_UNREACHABLE = 3
_RELEASE = re.compile(r"^\d+(\.\d+)+$")


def index_url() -> str:
    """The index pip would use: PIP_INDEX_URL, then pip's configuration, then pip's own default."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(".index-url"):
            return value.strip("'\"")
    # pip's default index, read from pip itself so that no host name is written here.
    from pip._internal.models.index import PyPI

    return PyPI.simple_url


@dataclass(frozen=True)
class Wheel:
    filename: str
    url: str
    size: int | None
    python: str | None  # "3.12" for a CPython wheel, None for py3/abi3 and free-threaded builds
    linux_x86_64: bool


@dataclass
class Project:
    name: str
    wheels: dict[str, list[Wheel]] = field(default_factory=dict)  # release -> its wheels

    def releases(self) -> list[str]:
        return sorted((v for v in self.wheels if _RELEASE.match(v)), key=version_key)

    def python_range(self, version: str) -> tuple[str, str] | None:
        pythons = sorted(
            {w.python for w in self.wheels.get(version, []) if w.python and w.linux_x86_64}, key=version_key
        )
        return (pythons[0], pythons[-1]) if pythons else None


class Index:
    """The two questions asked of the index: which wheels a project has, and a wheel's Requires-Dist."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self._projects: dict[str, Project] = {}

    def _get(self, url: str, headers: dict[str, str] | None = None) -> bytes:
        request = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.read()

    def load(self, names: list[str]) -> None:
        with ThreadPoolExecutor(max_workers=4) as pool:
            for project in pool.map(self._project, names):
                self._projects[project.name] = project

    def project(self, name: str) -> Project:
        return self._projects[name]

    def _project(self, name: str) -> Project:
        raw = json.loads(self._get(f"{self.url}/{name}/", {"Accept": SIMPLE_JSON}))
        project = Project(name)
        for entry in raw.get("files", []):
            try:
                _, version, _, tags = parse_wheel_filename(entry["filename"])
            except (InvalidWheelFilename, InvalidVersion):  # an sdist, or a name no installer takes
                continue
            if entry.get("yanked"):
                continue
            # A CPython build's tag names its ABI after itself: abi3 and free-threaded (cp314t) builds are skipped.
            cpython = sorted({t.interpreter for t in tags if t.interpreter.startswith("cp") and t.abi == t.interpreter})
            wheel = Wheel(
                entry["filename"],
                entry["url"],
                entry.get("size"),
                f"{cpython[0][2]}.{cpython[0][3:]}" if cpython else None,
                any("linux" in t.platform and "x86_64" in t.platform for t in tags),
            )
            project.wheels.setdefault(str(version), []).append(wheel)
        return project

    def requires_dist(self, name: str, version: str) -> list[str]:
        wheels = self.project(name).wheels.get(version, [])
        wheel = next((w for w in wheels if w.linux_x86_64), wheels[0] if wheels else None)
        if wheel is None:
            return []
        try:
            metadata = self._get(f"{wheel.url}.metadata").decode("utf-8")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            metadata = self._metadata_from_zip(wheel)
        return HeaderParser().parsestr(metadata).get_all("Requires-Dist") or []

    def _metadata_from_zip(self, wheel: Wheel) -> str:
        # No PEP 658 file: read the METADATA member through HTTP range requests
        # (a zip's directory sits at its end), never the whole 100 MB wheel.
        with zipfile.ZipFile(io.BufferedReader(_RangeFile(self, wheel), buffer_size=1 << 16)) as archive:
            member = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            return archive.read(member).decode("utf-8")


class _RangeFile(io.RawIOBase):
    def __init__(self, index: Index, wheel: Wheel):
        self._index, self._url, self._size, self._position = index, wheel.url, wheel.size, 0
        if self._size is None:
            head = urllib.request.Request(wheel.url, method="HEAD")
            with urllib.request.urlopen(head, timeout=TIMEOUT_S) as response:
                self._size = int(response.headers["Content-Length"])

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = base + offset
        return self._position

    def readinto(self, buffer) -> int:
        end = min(self._position + len(buffer), self._size) - 1
        if end < self._position:
            return 0
        data = self._index._get(self._url, {"Range": f"bytes={self._position}-{end}"})
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)


def verify(matrix: Matrix, index: Index) -> tuple[list[str], list[str]]:
    """(disagreements, notes): every way the matrix and the index differ, and what could not be checked."""
    index.load(["torch", "torchvision", "torch-xla", "libtpu", "torch-tpu"])
    problems: list[str] = []
    notes: list[str] = []
    requires = _requirements(matrix, index)
    _check_torch(problems, matrix, index, requires)
    _check_torch_xla(problems, notes, matrix, index, requires)
    _check_torch_tpu(problems, matrix, index, requires)
    return problems, notes


def _requirements(matrix: Matrix, index: Index) -> dict[tuple[str, str], list[str]]:
    """(project, version) -> its Requires-Dist, for every release the matrix names, fetched side by side."""
    jobs: dict = {}
    with ThreadPoolExecutor(max_workers=8) as pool:
        for release in matrix.torch.values():
            for version in release.versions:
                jobs[("torch", version)] = pool.submit(index.requires_dist, "torch", version)
                if release.torchvision:
                    vision = f"{release.torchvision}.{version.split('.')[2]}"
                    jobs[("torchvision", vision)] = pool.submit(index.requires_dist, "torchvision", vision)
        for release in matrix.torch_xla.values():
            for _, xla in release.pairs:
                jobs[("torch-xla", xla)] = pool.submit(index.requires_dist, "torch-xla", xla)
        for release in matrix.torch_tpu.values():
            jobs[("torch-tpu", release.version)] = pool.submit(index.requires_dist, "torch-tpu", release.version)
        return {key: job.result() for key, job in jobs.items()}


def _check_torch(problems: list[str], matrix: Matrix, index: Index, results: dict) -> None:
    torch_index = index.project("torch")
    vision_index = index.project("torchvision")
    # torch: every listed release exists, and every release of a listed minor is listed.
    minors = set(matrix.torch)
    oldest = min(minors, key=version_key)
    for version in torch_index.releases():
        minor = minor_of(version)
        if version_key(minor) < version_key(oldest):
            continue
        if minor not in minors:
            problems.append(f"torch {version}: on the index, but the matrix has no {minor} row")
        elif version not in matrix.torch[minor].versions:
            problems.append(f"torch {version}: on the index, missing from the matrix's torch {minor} versions")
    for minor, release in matrix.torch.items():
        for version in release.versions:
            if version not in torch_index.wheels:
                problems.append(f"torch {version}: in the matrix's {minor} row, not on the index")
                continue
            pythons = [("torch", version, torch_index.python_range(version))]
            if release.torchvision:
                vision = f"{release.torchvision}.{version.split('.')[2]}"
                if vision not in vision_index.wheels:
                    problems.append(f"torchvision {vision} (for torch {version}): not on the index")
                else:
                    pythons.append(("torchvision", vision, vision_index.python_range(vision)))
                    pin = _extra_requirement(results[("torchvision", vision)], None, "torch")
                    if pin is None or not pin.specifier.contains(version, prereleases=True):
                        found = f"torch{pin.specifier}" if pin else "no torch requirement"
                        problems.append(
                            f"torchvision {vision}: requires {found}, the matrix pairs it with torch {version}"
                        )
            else:
                newer = [
                    v for v in vision_index.releases() if minor_of(v) == _next_minor(_previous_vision(matrix, minor))
                ]
                if newer:
                    problems.append(
                        f"torch {minor}: the matrix says no torchvision, the index has torchvision {newer[0]}"
                    )
            _check_python(problems, f"torch {version}", release.python, pythons)
            _check_pypi_cuda(problems, matrix, release, version, results[("torch", version)])


def _check_torch_xla(problems: list[str], notes: list[str], matrix: Matrix, index: Index, results: dict) -> None:
    torch_index = index.project("torch")
    xla_index = index.project("torch-xla")
    # torch_xla: every pair exists, every release on the index is in a pair, the tpu extra pins the row's libtpu.
    paired = {xla for release in matrix.torch_xla.values() for _, xla in release.pairs}
    for version in xla_index.releases():
        if version not in paired and minor_of(version) in matrix.torch_xla:
            problems.append(f"torch_xla {version}: on the index, in no (torch, torch_xla) pair of the matrix")
    libtpu_index = index.project("libtpu")
    for minor, release in matrix.torch_xla.items():
        for torch, xla in release.pairs:
            if torch not in torch_index.wheels:
                problems.append(f"torch_xla pair ({torch}, {xla}): torch {torch} is not on the index")
            if xla not in xla_index.wheels:
                problems.append(f"torch_xla pair ({torch}, {xla}): torch_xla {xla} is not on the index")
                continue
            _check_python(
                problems, f"torch_xla {xla}", release.python, [("torch_xla", xla, xla_index.python_range(xla))]
            )
            libtpu = _extra_requirement(results[("torch-xla", xla)], "tpu", release.libtpu_package)
            if libtpu is None:
                problems.append(f"torch_xla {xla}: its tpu extra does not require {release.libtpu_package}")
            elif not libtpu.specifier.contains(release.libtpu, prereleases=True):
                problems.append(
                    f"torch_xla {xla}: its tpu extra requires {libtpu.name}{libtpu.specifier}, the matrix "
                    f"pins {release.libtpu}"
                )
        if release.libtpu_package == "libtpu":
            if release.libtpu not in libtpu_index.wheels:
                problems.append(f"libtpu {release.libtpu} (torch_xla {minor}): not on the index")
        else:
            notes.append(
                f"{release.libtpu_package} {release.libtpu} (torch_xla {minor}): served by its find_links "
                "page, not checked"
            )


def _check_torch_tpu(problems: list[str], matrix: Matrix, index: Index, results: dict) -> None:
    from packaging.specifiers import SpecifierSet

    torch_index = index.project("torch")
    tpu_index = index.project("torch-tpu")
    libtpu_index = index.project("libtpu")
    # torch-tpu: its torch range, libtpu floor and Python wheels.
    for version in tpu_index.releases():
        if version not in matrix.torch_tpu:
            problems.append(f"torch-tpu {version}: on the index, not in the matrix")
    for version, release in matrix.torch_tpu.items():
        if version not in tpu_index.wheels:
            problems.append(f"torch-tpu {version}: in the matrix, not on the index")
            continue
        requires = results[("torch-tpu", version)]
        torch_req = _extra_requirement(requires, None, "torch")
        expected = SpecifierSet(f">={release.torch[0]},<={release.torch[1]}")
        if torch_req is None or torch_req.specifier != expected:
            found = f"torch{torch_req.specifier}" if torch_req else "no torch requirement"
            problems.append(
                f"torch-tpu {version}: requires {found}, the matrix says torch {release.torch[0]}-{release.torch[1]}"
            )
        libtpu = _extra_requirement(requires, None, "libtpu")
        if libtpu is None or libtpu.specifier != SpecifierSet(f">={release.libtpu}"):
            found = f"libtpu{libtpu.specifier}" if libtpu else "no libtpu requirement"
            problems.append(f"torch-tpu {version}: requires {found}, the matrix's libtpu floor is {release.libtpu}")
        if release.libtpu not in libtpu_index.wheels:
            problems.append(f"libtpu {release.libtpu} (torch-tpu {version}'s floor): not on the index")
        _check_python(
            problems, f"torch-tpu {version}", release.python, [("torch-tpu", version, tpu_index.python_range(version))]
        )
        for torch in release.torch:
            if torch not in torch_index.wheels:
                problems.append(f"torch-tpu {version}: torch {torch} (an end of its range) is not on the index")


# What the default index's Linux x86-64 torch wheel pins for its CUDA runtime: the cu12 package
# up to torch 2.10, NVIDIA's cuda-toolkit metapackage from 2.11.
CUDA_RUNTIME_PINS = ("nvidia-cuda-runtime-cu12", "cuda-toolkit")


def _check_pypi_cuda(problems: list[str], matrix: Matrix, release, version: str, requires: list[str]) -> None:
    from packaging.requirements import Requirement

    linux = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}
    pins = [
        spec.version
        for req in map(Requirement, requires)
        if normalise(req.name) in CUDA_RUNTIME_PINS and (req.marker is None or req.marker.evaluate(linux))
        for spec in req.specifier
        if spec.operator == "=="
    ]
    found = minor_of(pins[0]) if pins else None
    expected = matrix.cuda[release.pypi_cuda].cuda if release.pypi_cuda else None
    if found != expected:
        says = f"pins CUDA {found}" if found else f"has no {' or '.join(CUDA_RUNTIME_PINS)} pin"
        problems.append(f"torch {version}: the index's wheel {says}, the matrix's pypi_cuda says {expected or 'none'}")


def _check_python(problems: list[str], what: str, row: tuple[str, str], found: list) -> None:
    ranges = [(name, version, span) for name, version, span in found if span]
    if not ranges:
        problems.append(f"{what}: no CPython Linux x86-64 wheels on the index")
        return
    low = max((span[0] for _, _, span in ranges), key=version_key)
    high = min((span[1] for _, _, span in ranges), key=version_key)
    if (low, high) != tuple(row):
        detail = ", ".join(f"{name} {version}: {span[0]}-{span[1]}" for name, version, span in ranges)
        problems.append(f"{what}: wheels cover Python {low}-{high} ({detail}), the matrix says {row[0]}-{row[1]}")


def _extra_requirement(lines: list[str], extra: str | None, name: str):
    from packaging.requirements import Requirement

    for line in lines:
        req = Requirement(line)
        if normalise(req.name) != normalise(name):
            continue
        plain = req.marker is None or req.marker.evaluate({"extra": ""})
        if extra is None and plain:
            return req
        if extra is not None and not plain and req.marker.evaluate({"extra": extra}):
            return req
    return None


def _previous_vision(matrix: Matrix, minor: str) -> str:
    older = [r.torchvision for m, r in matrix.torch.items() if r.torchvision and version_key(m) < version_key(minor)]
    return max(older, key=version_key)


def _next_minor(minor: str) -> str:
    major, number = minor.split(".")
    return f"{major}.{int(number) + 1}"


def run(matrix: Matrix, url: str | None = None) -> int:
    url = url or index_url()
    index = Index(url)
    try:
        problems, notes = verify(matrix, index)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EnvkitError(
            f"cannot reach the package index {url} ({reason}); the matrix was not checked", exit_code=EXIT_UNREACHABLE
        ) from None
    for note in notes:
        print(f"note: {note}")
    for problem in problems:
        print(problem)
    verdict = f"{len(problems)} disagreement{'s' if len(problems) != 1 else ''}" if problems else "the matrix agrees"
    print(f"matrix --verify against {url}: {verdict}")
    return 1 if problems else 0

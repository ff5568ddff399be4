"""The compatibility matrix is consistent data, and lookups never guess."""

from __future__ import annotations

import functools
import io
import zipfile

import pytest
import yaml
from paths import DATA
from xla_env import environment_missing

from envkit.errors import EnvkitError
from envkit.project.matrix import MATRIX_PATH, load_matrix, minor_of, python_in_range, version_key


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def test_covers_the_releases_the_targets_need(matrix):
    assert {f"2.{minor}" for minor in range(1, 16)} <= set(matrix.torch)
    assert {f"2.{minor}" for minor in range(1, 10)} == set(matrix.torch_xla)
    # Every torch release from 2.1 to 2.14 has CUDA variants; 2.15 is not in PyTorch's table yet.
    assert {minor for minor, release in matrix.torch.items() if release.cuda_variants} == {
        f"2.{minor}" for minor in range(1, 15)
    }


@pytest.mark.parametrize(
    ("torch", "torchvision"), [("2.1", "0.16"), ("2.9", "0.24"), ("2.13", "0.28"), ("2.14", "0.29"), ("2.15", None)]
)
def test_torchvision_follows_torch(matrix, torch, torchvision):
    assert matrix.torch[torch].torchvision == torchvision


def test_a_release_without_torchvision_says_why(matrix):
    assert matrix.torch, "the matrix has no torch release"
    for release in matrix.torch.values():
        assert (release.torchvision is None) == bool(release.torchvision_missing), release.minor


@pytest.mark.parametrize(
    ("torch", "variants"),
    [
        ("2.14", ("cu126", "cu130", "cu132")),
        ("2.12", ("cu126", "cu130", "cu132")),
        ("2.11", ("cu126", "cu128", "cu130")),
        ("2.10", ("cu126", "cu128", "cu130")),
        ("2.9", ("cu126", "cu128", "cu130")),
        ("2.8", ("cu126", "cu128", "cu129")),
        ("2.7", ("cu126", "cu128", "cu118")),
        ("2.6", ("cu126", "cu124", "cu118")),
        ("2.5", ("cu124", "cu121", "cu118")),
        ("2.1", ("cu121", "cu118")),
    ],
)
def test_cuda_variants_per_release(matrix, torch, variants):
    assert matrix.torch[torch].cuda_variants == variants


def test_cu132_runs_on_a_cuda_13_2_ubuntu_24_04_base(matrix):
    variant = matrix.cuda["cu132"]
    assert variant.base_image.startswith("nvidia/cuda:13.2.") and variant.base_image.endswith("-base-ubuntu24.04")
    assert variant.python == "3.12"


def test_python_ranges_follow_the_wheels(matrix):
    # torch 2.9-2.14 ship cp314 wheels; torch_xla 2.9 stops at 3.13; torch 2.15 starts at 3.11.
    for minor in ("2.9", "2.10", "2.11", "2.12", "2.13", "2.14"):
        assert matrix.torch[minor].python == ("3.10", "3.14")
    assert matrix.torch_xla["2.9"].python == ("3.10", "3.13")
    assert matrix.torch["2.15"].python == ("3.11", "3.15")


def test_rows_are_internally_consistent(matrix):
    assert matrix.torch and matrix.cuda, "the matrix has no torch release or no CUDA variant"
    for release in matrix.torch.values():
        low, high = release.python
        assert version_key(low) <= version_key(high)
        assert release.versions and all(minor_of(v) == release.minor for v in release.versions)
        assert release.cuda_source
        for variant in release.cuda_choices():
            assert variant in matrix.cuda, f"torch {release.minor} names unknown variant {variant}"
            assert matrix.cuda[variant].cuda.replace(".", "") == variant[2:]
    for variant in matrix.cuda.values():
        assert variant.base_image.startswith(f"nvidia/cuda:{variant.cuda}.")
        assert variant.source
    for release in matrix.torch_xla.values():
        for torch, xla in release.pairs:
            assert torch in matrix.torch[minor_of(torch)].versions
            assert minor_of(xla) == release.minor
    for release in matrix.torch_tpu.values():
        for torch in release.torch:
            assert torch in matrix.torch[minor_of(torch)].versions


def test_torch_xla_pairs_follow_upstream(matrix):
    # Bugfix releases exist on one side only: torch_xla 2.8.1 goes with torch 2.8.0.
    assert matrix.xla_pair("torch_xla", "2.8.0", "2.8.1")[1] == "2.8.1"
    assert matrix.xla_pair("torch_xla", "2.8.0", None)[1] == "2.8.1"
    assert matrix.xla_pair("torch_xla", "2.6.0", "2.6.0")[1] == "2.6.0"
    release, xla = matrix.xla_pair("torch", "2.9.0", None)
    assert (release.libtpu, release.find_links, xla) == ("0.0.21", (), "2.9.0")
    assert matrix.torch_xla["2.5"].libtpu_package == "libtpu-nightly"
    assert len(matrix.torch_xla["2.6"].find_links) == 2


@pytest.mark.parametrize(
    ("torch", "torch_xla"), [("2.9.1", None), ("2.9.0", "2.9.1"), ("2.8.1", "2.8.1"), ("2.9.0", "2.8.0")]
)
def test_an_invalid_pair_lists_the_valid_pairs(matrix, torch, torch_xla):
    with pytest.raises(
        EnvkitError, match=r"is not a released torch_xla pair; valid pairs: torch 2\.\d\.0 \+ torch_xla"
    ):
        matrix.xla_pair("torch_xla", torch, torch_xla)


def test_invalid_pair_names_the_pairs_of_its_minor(matrix):
    with pytest.raises(EnvkitError) as error:
        matrix.xla_pair("torch_xla", "2.8.0", "2.8.2")
    assert str(error.value).endswith("valid pairs: torch 2.8.0 + torch_xla 2.8.0, torch 2.8.0 + torch_xla 2.8.1")


def test_torch_tpu_rows(matrix):
    release = matrix.torch_tpu["0.2.0"]
    assert (release.torch, release.libtpu, release.python[0]) == (("2.11.0", "2.15.0"), "0.0.50", "3.11")
    assert matrix.torch_tpu_release("torch", "2.13.0", None) is release
    with pytest.raises(
        EnvkitError,
        match=r"torch 2\.9\.0 is outside every torch_tpu release's torch range \(torch_tpu 0\.2\.0: torch 2\.11\.0-2\.15\.0\)",
    ):
        matrix.torch_tpu_release("backend", "2.9.0", None)
    with pytest.raises(EnvkitError, match=r"torch_tpu 9\.9\.9 is not in envkit's matrix; supported: 0\.2\.0"):
        matrix.torch_tpu_release("torch_tpu", "2.13.0", "9.9.9")


@pytest.mark.parametrize(
    ("torch", "backend"),
    [("2.9.0", "torch_xla"), ("2.1.0", "torch_xla"), ("2.11.0", "torch_tpu"), ("2.15.0", "torch_tpu")],
)
def test_default_tpu_backend(matrix, torch, backend):
    assert matrix.default_tpu_backend("torch", torch) == backend


def test_a_torch_without_any_tpu_backend(matrix):
    with pytest.raises(
        EnvkitError,
        match=r"torch 2\.10\.0 has no TPU backend; torch_xla needs torch 2\.1\.0-2\.9\.0 .*torch_tpu needs torch 2\.11\.0-2\.15\.0",
    ):
        matrix.default_tpu_backend("torch", "2.10.0")


def test_python_range_is_numeric_not_lexical():
    assert python_in_range("3.10", ("3.9", "3.13"))
    assert not python_in_range("3.9", ("3.10", "3.13"))


def test_unknown_torch_lists_the_supported_releases(matrix):
    with pytest.raises(EnvkitError, match=r"torch 1\.13\.1 is not in envkit's matrix; supported: 2\.1\.x, .*2\.15\.x"):
        matrix.torch_release("torch", "1.13.1")


def test_unreleased_patch_lists_the_releases(matrix):
    with pytest.raises(EnvkitError, match=r"torch 2\.8\.1 was never released; releases of torch 2\.8: 2\.8\.0$"):
        matrix.torch_release("torch", "2.8.1")


def test_unknown_cuda_lists_the_valid_variants(matrix):
    with pytest.raises(EnvkitError, match=r"CUDA 12\.8 has no torch 2\.12 wheels; valid choices: 12\.6, 13\.0, 13\.2"):
        matrix.cuda_variant("cuda", matrix.torch["2.12"], "12.8")


# What the default index's torch wheels pin (nvidia-cuda-runtime-cu12 / cuda-toolkit), read with uv
# for every release on 2026-11-24; `envkit matrix --verify` re-reads it.
PYPI_CUDA = {
    "2.1": "12.1",
    "2.2": "12.1",
    "2.3": "12.1",
    "2.4": "12.1",
    "2.5": "12.4",
    "2.6": "12.4",
    "2.7": "12.6",
    "2.8": "12.8",
    "2.9": "12.8",
    "2.10": "12.8",
    "2.11": "13.0",
    "2.12": "13.0",
    "2.13": "13.0",
    "2.14": "13.0",
    "2.15": "13.2",
}


def test_every_release_records_the_cuda_build_of_the_default_index(matrix):
    assert {minor: matrix.cuda[release.pypi_cuda].cuda for minor, release in matrix.torch.items()} == PYPI_CUDA
    assert "Requires-Dist" in matrix.pypi_cuda_source


def test_default_cuda_variant_is_the_default_indexs_own_build(matrix):
    assert matrix.cuda_variant("cuda", matrix.torch["2.9"], None).variant == "cu128"
    assert matrix.cuda_variant("cuda", matrix.torch["2.13"], None).variant == "cu130"
    # torch 2.15 has no variant on PyTorch's index yet, but the default index's build is CUDA 13.2.
    assert matrix.cuda_variant("cuda", matrix.torch["2.15"], None).variant == "cu132"


def test_a_release_with_no_cuda_build_anywhere_is_one_line(matrix):
    bare = matrix.torch["2.15"]._replace(pypi_cuda=None)
    with pytest.raises(
        EnvkitError, match=r"torch 2\.15 has no CUDA wheel variant in envkit's matrix; torch releases with CUDA"
    ):
        matrix.cuda_variant("cuda", bare, None)


# --------------------------------------------------------------------------- envkit matrix --verify


INDEX_FIXTURE = DATA / "index.yaml"


class FakeIndex:
    """A PEP 691 simple index of tests/data/index.yaml (hand-kept, never read from the matrix), served on loopback.

    Wheels are small real zips holding only their METADATA; torch-tpu has no PEP 658
    file, so its Requires-Dist is read through HTTP range requests as on the real index.
    """

    def __init__(self, releases: dict):
        self.projects: dict[str, dict[str, str]] = {}  # name -> filename -> METADATA
        self.no_pep658 = {"torch-tpu"}
        for name in ("torch", "torchvision", "torch-xla", "torch-tpu"):
            for version, (python, requires) in releases[name].items():
                self.add(name, version, tuple(python), requires)
        for version in releases["libtpu"]:
            self.add("libtpu", version, None, [])

    def add(self, name, version, python, requires, drop=()):
        files = self.projects.setdefault(name, {})
        for filename in [f for f in list(files) if f"-{version}-" in f]:
            del files[filename]
        tags = (
            ["py3-none"]
            if python is None
            else [
                f"cp3{minor}-cp3{minor}"
                for minor in range(int(python[0][2:]), int(python[1][2:]) + 1)
                if f"3.{minor}" not in drop
            ]
        )
        metadata = "".join(
            [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", *(f"Requires-Dist: {r}\n" for r in requires)]
        )
        for tag in tags:
            files[f"{name.replace('-', '_')}-{version}-{tag}-manylinux_2_28_x86_64.whl"] = metadata

    def wheel(self, name, filename) -> bytes:
        return _wheel_bytes(filename, self.projects[name][filename])

    def serve(self):
        import http.server
        import json
        import threading

        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                parts = self.path.strip("/").split("/")
                if parts[0] == "simple" and parts[1] in index.projects:
                    files = [
                        {
                            "filename": f,
                            "url": f"http://{self.headers['Host']}/files/{parts[1]}/{f}",
                            "yanked": False,
                            "size": len(index.wheel(parts[1], f)),
                        }
                        for f in index.projects[parts[1]]
                    ]
                    return self.reply(json.dumps({"files": files}).encode())
                if parts[0] == "files" and len(parts) == 3:
                    name, filename = parts[1], parts[2]
                    if filename.endswith(".metadata") and name not in index.no_pep658:
                        return self.reply(index.projects[name][filename.removesuffix(".metadata")].encode())
                    if filename in index.projects.get(name, {}):
                        data = index.wheel(name, filename)
                        first, last = (int(x) for x in self.headers["Range"].removeprefix("bytes=").split("-"))
                        return self.reply(data[first : last + 1], 206)
                self.send_error(404)

            def reply(self, body, status=200):
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, f"http://127.0.0.1:{server.server_address[1]}/simple"


@functools.cache
def _wheel_bytes(filename: str, metadata: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("padding.bin", b"\0" * 200_000)  # so the reader must seek, not read it all
        archive.writestr(f"{filename.split('-')[0]}-{filename.split('-')[1]}.dist-info/METADATA", metadata)
    return buffer.getvalue()


@pytest.fixture
def fake_index():
    return FakeIndex(yaml.safe_load(INDEX_FIXTURE.read_text()))


def verify_against(matrix, index):
    from envkit.lock.index_check import Index, verify

    server, url = index.serve()
    try:
        return verify(matrix, Index(url))
    finally:
        server.shutdown()


def test_verify_finds_nothing_when_the_index_agrees(matrix, fake_index):
    problems, notes = verify_against(matrix, fake_index)
    assert problems == []
    assert notes and all("libtpu-nightly" in note and "not checked" in note for note in notes)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda i: i.add("torch", "2.16.0", ("3.11", "3.15"), []),
            "torch 2.16.0: on the index, but the matrix has no 2.16 row",
        ),
        (
            lambda i: i.add("torch", "2.9.2", ("3.10", "3.14"), []),
            "torch 2.9.2: on the index, missing from the matrix's torch 2.9 versions",
        ),
        (
            lambda i: i.add("torchvision", "0.24.1", ("3.10", "3.14"), ["torch==2.9.0"]),
            "torchvision 0.24.1: requires torch==2.9.0, the matrix pairs it with torch 2.9.1",
        ),
        (
            lambda i: i.add("torchvision", "0.30.0", ("3.11", "3.15"), ["torch==2.15.0"]),
            "torch 2.15: the matrix says no torchvision, the index has torchvision 0.30.0",
        ),
        (
            lambda i: i.add("torch", "2.14.1", ("3.10", "3.14"), [], drop=("3.14",)),
            "torch 2.14.1: wheels cover Python 3.10-3.13 (torch 2.14.1: 3.10-3.13, torchvision 0.29.1: 3.10-3.14), the matrix says 3.10-3.14",
        ),
        (
            lambda i: i.add("torch-xla", "2.9.0", ("3.10", "3.13"), ['libtpu==0.0.22; extra == "tpu"']),
            "torch_xla 2.9.0: its tpu extra requires libtpu==0.0.22, the matrix pins 0.0.21",
        ),
        (
            lambda i: i.add("torch-xla", "2.9.1", ("3.10", "3.13"), []),
            "torch_xla 2.9.1: on the index, in no (torch, torch_xla) pair of the matrix",
        ),
        (
            lambda i: i.add("torch-tpu", "0.2.0", ("3.11", "3.14"), ["torch>=2.11.0,<=2.16.0", "libtpu>=0.0.50"]),
            "torch-tpu 0.2.0: requires torch<=2.16.0,>=2.11.0, the matrix says torch 2.11.0-2.15.0",
        ),
        (
            lambda i: i.add("torch-tpu", "0.2.0", ("3.11", "3.14"), ["torch>=2.11.0,<=2.15.0", "libtpu>=0.0.51"]),
            "torch-tpu 0.2.0: requires libtpu>=0.0.51, the matrix's libtpu floor is 0.0.50",
        ),
        (lambda i: i.projects["libtpu"].clear(), "libtpu 0.0.21 (torch_xla 2.9): not on the index"),
        (
            lambda i: i.add(
                "torch", "2.9.1", ("3.10", "3.14"), ['cuda-toolkit[cudart]==13.0.2; platform_system == "Linux"']
            ),
            "torch 2.9.1: the index's wheel pins CUDA 13.0, the matrix's pypi_cuda says 12.8",
        ),
        (
            lambda i: i.add("torch", "2.13.0", ("3.10", "3.14"), []),
            "torch 2.13.0: the index's wheel has no nvidia-cuda-runtime-cu12 or cuda-toolkit pin, the matrix's pypi_cuda says 13.0",
        ),
    ],
)
def test_verify_prints_each_disagreement(matrix, fake_index, change, expected):
    change(fake_index)
    problems, _ = verify_against(matrix, fake_index)
    assert expected in problems


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('torchvision: "0.24"', 'torchvision: "0.25"'),  # torch 2.9 paired with the wrong torchvision
        ('"2.8": {versions: ["2.8.0"]', '"2.8": {versions: ["2.8.0", "2.8.1"]'),  # a release that never was
        ('version: "0.0.21"', 'version: "0.0.22"'),  # torch_xla 2.9 with another libtpu
        (
            'python: ["3.10", "3.14"], cuda: [cu126, cu128, cu130], pypi_cuda: cu128, cuda_source: "PyTorch release compatibility matrix, 2.9',
            'python: ["3.9", "3.14"], cuda: [cu126, cu128, cu130], pypi_cuda: cu128, cuda_source: "PyTorch release compatibility matrix, 2.9',
        ),
        (
            'pypi_cuda: cu128, cuda_source: "PyTorch release compatibility matrix, 2.9',
            'pypi_cuda: cu130, cuda_source: "PyTorch release compatibility matrix, 2.9',
        ),  # the default index's build
    ],
    ids=["torchvision-pairing", "invented-release", "libtpu-pin", "python-range", "pypi-cuda"],
)
def test_verify_catches_a_wrong_matrix_entry(tmp_path, fake_index, old, new):
    """The served index is independent data: an error put into a copy of the matrix shows as a disagreement."""
    text = MATRIX_PATH.read_text()
    assert text.count(old) == 1
    (tmp_path / "matrix.yaml").write_text(text.replace(old, new))
    problems, _ = verify_against(load_matrix.__wrapped__(tmp_path / "matrix.yaml"), fake_index)
    assert problems


def test_verify_cli_exit_codes(matrix, fake_index, capsys):
    from envkit.lock.index_check import run

    fake_index.add("torch", "2.16.0", ("3.11", "3.15"), [])
    server, url = fake_index.serve()
    try:
        assert run(matrix, url) == 1
    finally:
        server.shutdown()
    out = capsys.readouterr().out.splitlines()
    assert "torch 2.16.0: on the index, but the matrix has no 2.16 row" in out
    assert out[-1] == f"matrix --verify against {url}: 1 disagreement"


def test_an_unreachable_index_is_one_line_exit_3(matrix):
    from envkit.lock.index_check import run

    with pytest.raises(EnvkitError) as error:
        run(matrix, "http://127.0.0.1:9/simple")
    assert error.value.exit_code == 3
    assert str(error.value).startswith("cannot reach the package index http://127.0.0.1:9/simple (")
    assert str(error.value).endswith("); the matrix was not checked")


def test_the_index_is_pips(monkeypatch):
    from envkit.lock.index_check import index_url

    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:1/mirror/simple")
    assert index_url() == "http://127.0.0.1:1/mirror/simple"
    monkeypatch.delenv("PIP_INDEX_URL")
    from pip._internal.models.index import PyPI

    assert index_url() in (PyPI.simple_url, *_configured_index_urls())


def _configured_index_urls() -> list[str]:
    import subprocess
    import sys

    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    return [
        line.partition("=")[2].strip("'\"")
        for line in listed.splitlines()
        if line.partition("=")[0].endswith(".index-url")
    ]


@pytest.mark.slow
def test_the_matrix_agrees_with_the_package_index(matrix, capsys):
    """What CI runs: every pin in the matrix against the index pip uses; skips when it cannot be reached,
    fails instead under ENVKIT_REQUIRE_INDEX=1 (CI)."""
    from envkit.lock.index_check import run

    try:
        code = run(matrix)
    except EnvkitError as exc:
        if exc.exit_code == 3:
            environment_missing(str(exc), "ENVKIT_REQUIRE_INDEX")
        raise
    assert code == 0, capsys.readouterr().out

"""The compatibility matrix is consistent data, and lookups never guess."""

from __future__ import annotations

import pytest

from envkit.errors import EnvkitError
from envkit.matrix import load_matrix, minor_of, python_in_range, version_key


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
    for release in matrix.torch.values():
        low, high = release.python
        assert version_key(low) <= version_key(high)
        assert release.versions and all(minor_of(v) == release.minor for v in release.versions)
        assert release.cuda_source
        for variant in release.cuda_variants:
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


@pytest.mark.parametrize(("torch", "torch_xla"), [("2.9.1", None), ("2.9.0", "2.9.1"), ("2.8.1", "2.8.1"), ("2.9.0", "2.8.0")])
def test_an_invalid_pair_lists_the_valid_pairs(matrix, torch, torch_xla):
    with pytest.raises(EnvkitError, match=r"is not a released torch_xla pair; valid pairs: torch 2\.\d\.0 \+ torch_xla"):
        matrix.xla_pair("torch_xla", torch, torch_xla)


def test_invalid_pair_names_the_pairs_of_its_minor(matrix):
    with pytest.raises(EnvkitError) as error:
        matrix.xla_pair("torch_xla", "2.8.0", "2.8.2")
    assert str(error.value).endswith("valid pairs: torch 2.8.0 + torch_xla 2.8.0, torch 2.8.0 + torch_xla 2.8.1")


def test_torch_tpu_rows(matrix):
    release = matrix.torch_tpu["0.2.0"]
    assert (release.torch, release.libtpu, release.python[0]) == (("2.11.0", "2.15.0"), "0.0.50", "3.11")
    assert matrix.torch_tpu_release("torch", "2.13.0", None) is release
    with pytest.raises(EnvkitError, match=r"torch 2\.9\.0 is outside every torch_tpu release's torch range \(torch_tpu 0\.2\.0: torch 2\.11\.0-2\.15\.0\)"):
        matrix.torch_tpu_release("backend", "2.9.0", None)
    with pytest.raises(EnvkitError, match=r"torch_tpu 9\.9\.9 is not in envkit's matrix; supported: 0\.2\.0"):
        matrix.torch_tpu_release("torch_tpu", "2.13.0", "9.9.9")


@pytest.mark.parametrize(("torch", "backend"), [("2.9.0", "torch_xla"), ("2.1.0", "torch_xla"), ("2.11.0", "torch_tpu"), ("2.15.0", "torch_tpu")])
def test_default_tpu_backend(matrix, torch, backend):
    assert matrix.default_tpu_backend("torch", torch) == backend


def test_a_torch_without_any_tpu_backend(matrix):
    with pytest.raises(EnvkitError, match=r"torch 2\.10\.0 has no TPU backend; torch_xla needs torch 2\.1\.0-2\.9\.0 .*torch_tpu needs torch 2\.11\.0-2\.15\.0"):
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


def test_default_cuda_variant_is_the_first_listed(matrix):
    assert matrix.cuda_variant("cuda", matrix.torch["2.9"], None).variant == "cu126"

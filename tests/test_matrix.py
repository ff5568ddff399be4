"""The compatibility matrix is consistent data, and lookups never guess."""

from __future__ import annotations

import pytest

from envkit.errors import EnvkitError
from envkit.matrix import load_matrix, python_in_range, version_key


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def test_covers_the_releases_the_targets_need(matrix):
    assert {f"2.{minor}" for minor in range(1, 15)} <= set(matrix.torch)
    assert {f"2.{minor}" for minor in range(1, 10)} == set(matrix.tpu)
    assert {minor for minor, release in matrix.torch.items() if release.cuda_variants} == {
        f"2.{minor}" for minor in range(1, 10)
    }


@pytest.mark.parametrize(
    ("torch", "torchvision"), [("2.1", "0.16"), ("2.9", "0.24"), ("2.13", "0.28"), ("2.14", "0.29")]
)
def test_torchvision_follows_torch(matrix, torch, torchvision):
    assert matrix.torch[torch].torchvision == torchvision


@pytest.mark.parametrize(
    ("torch", "variants"),
    [
        ("2.9", {"cu126", "cu128", "cu130"}),
        ("2.8", {"cu126", "cu128", "cu129"}),
        ("2.7", {"cu118", "cu126", "cu128"}),
        ("2.6", {"cu118", "cu124", "cu126"}),
        ("2.5", {"cu118", "cu121", "cu124"}),
        ("2.1", {"cu118", "cu121"}),
    ],
)
def test_cuda_variants_per_release(matrix, torch, variants):
    assert set(matrix.torch[torch].cuda_variants) == variants


def test_rows_are_internally_consistent(matrix):
    for release in matrix.torch.values():
        low, high = release.python
        assert version_key(low) <= version_key(high)
        for variant in release.cuda_variants:
            assert variant in matrix.cuda, f"torch {release.minor} names unknown variant {variant}"
            assert matrix.cuda[variant].cuda.replace(".", "") == variant[2:]
    for variant in matrix.cuda.values():
        assert variant.base_image.startswith(f"nvidia/cuda:{variant.cuda}.")


def test_tpu_releases(matrix):
    assert matrix.tpu["2.9"].libtpu == "0.0.21"
    assert matrix.tpu["2.9"].python == ("3.10", "3.13")
    assert matrix.tpu["2.9"].find_links == ()
    assert matrix.tpu["2.5"].libtpu_package == "libtpu-nightly"
    assert len(matrix.tpu["2.6"].find_links) == 2


def test_python_range_is_numeric_not_lexical():
    assert python_in_range("3.10", ("3.9", "3.13"))
    assert not python_in_range("3.9", ("3.10", "3.13"))


def test_unknown_torch_lists_the_supported_releases(matrix):
    with pytest.raises(EnvkitError, match=r"torch 1\.13\.1 is not in envkit's matrix; supported: 2\.1\.x, .*2\.14\.x"):
        matrix.torch_release("torch", "1.13.1")


def test_unknown_cuda_lists_the_valid_variants(matrix):
    with pytest.raises(EnvkitError, match=r"CUDA 12\.4 has no torch 2\.9 wheels; valid choices: 12\.6, 12\.8, 13\.0"):
        matrix.cuda_variant("cuda", matrix.torch["2.9"], "12.4")


def test_default_cuda_variant_is_the_first_listed(matrix):
    assert matrix.cuda_variant("cuda", matrix.torch["2.9"], None).variant == "cu126"


def test_tpu_release_outside_the_matrix(matrix):
    with pytest.raises(EnvkitError, match=r"torch 2\.13\.0 has no torch_xla release"):
        matrix.tpu_release("torch", "2.13.0")

"""A requirement's name: read without packaging for the plain shapes, by packaging for the rest, the same name."""

from __future__ import annotations

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from envkit.project.requirement import allows, plain_requirement, requirement_name

REQUIREMENTS = [
    "torch",
    "torch==2.9.0",
    "Foo_Bar.baz==1.0",
    "tqdm>=4.6,<5",
    "a<1",
    "x.y-z!=01.2.3",
    "torch==2.9.0+cpu",
    "torch_xla[tpu]==2.9.0",
    "numpy>=2.0rc1",
    "pkg==1.0.*",
    "pkg ; python_version >= '3.11'",
    "pkg @ https://example.invalid/pkg-1.0-py3-none-any.whl",
]


@pytest.mark.parametrize("requirement", REQUIREMENTS)
def test_the_name_is_packagings(requirement):
    assert requirement_name(requirement) == canonicalize_name(Requirement(requirement).name)


@pytest.mark.parametrize("requirement", ["torch>=2.9", "tqdm>=4.6,<5", "a<=1,>=0.1,<=1", "Foo_Bar.baz==1.0", "x"])
def test_a_plain_requirement_is_read_as_packaging_reads_it(requirement):
    parsed = Requirement(requirement)
    assert plain_requirement(requirement) == (canonicalize_name(parsed.name), str(parsed.specifier))


@pytest.mark.parametrize("requirement", ["a-==1", "foo~=1", "foo==1.", "-foo==1"])
def test_what_packaging_refuses_is_refused(requirement):
    with pytest.raises(InvalidRequirement):
        Requirement(requirement)
    with pytest.raises(InvalidRequirement):
        requirement_name(requirement)


SPECIFIERS = [
    "",
    ">=2.9",
    "==2.9",
    "==2.9.0",
    "!=2.9",
    "<2.9",
    "<=2.9",
    ">2.9",
    ">2.8,<3",
    ">=2.9.1,<2.10",
    "~=2.9",
    "==2.*",
]
VERSIONS = ["2.9.0", "2.9", "2.9.1", "2.8.9", "3.0.0", "2.10.0", "2.9.0+cpu", "2.9.0rc1", "2.9.0.post1"]


@pytest.mark.parametrize("specifier", SPECIFIERS)
@pytest.mark.parametrize("version", VERSIONS)
def test_allows_what_packaging_allows(specifier, version):
    assert allows(specifier, version) == SpecifierSet(specifier).contains(version, prereleases=True)

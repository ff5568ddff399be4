"""docs/benchmarks.md against benchmarks/: every bench_*.py is listed once, described by its own docstring's
first paragraph, and every name listed exists."""

from __future__ import annotations

import ast
import re

from paths import REPO_ROOT

ROW = re.compile(r"^\| `benchmarks/(bench_[a-z0-9_]+\.py)` \| (.*) \|$", re.MULTILINE)


def summary(path) -> str:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    return " ".join(docstring.split("\n\n")[0].split()).replace("|", "/")


def test_docs_list_every_benchmark_by_its_docstring_and_only_those():
    listed = ROW.findall((REPO_ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8"))
    benchmarks = {path.name: summary(path) for path in sorted((REPO_ROOT / "benchmarks").glob("bench_*.py"))}
    assert dict(listed) == benchmarks
    assert len(listed) == len(benchmarks)


def _pins(path) -> dict[str, str]:
    """name (normalized) -> version of each `name==version` line of a requirements input."""
    from packaging.utils import canonicalize_name

    pins = re.findall(r"^([A-Za-z0-9._-]+)==(\S+)", path.read_text(encoding="utf-8"), re.MULTILINE)
    return {canonicalize_name(name): version for name, version in pins}


def test_the_benchmark_environment_holds_every_core_dependency_as_the_dev_environment_pins_it():
    """bench_render.py runs `envkit lock` in its project with .venv-bench's interpreter: without uv there (the bench
    venv lacked it) it failed in a fresh clone with "uv is not installed"."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = sorted(canonicalize_name(Requirement(spec).name) for spec in project["dependencies"])
    assert "uv" in core
    dev, bench = (_pins(REPO_ROOT / "requirements" / name) for name in ("dev.in", "bench.in"))
    assert {name: bench.get(name) for name in core} == {name: dev[name] for name in core}

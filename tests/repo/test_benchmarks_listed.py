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

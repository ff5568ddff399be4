"""README's benchmarks paragraph against benchmarks/: every bench_*.py is named there, and every name exists."""

from __future__ import annotations

import re


def test_readme_names_every_benchmark_and_only_those(repo_root):
    readme = (repo_root / "README.md").read_text()
    paragraph = readme[readme.index("Benchmarks print figures") :].split("\n\n", 1)[0]
    named = set(re.findall(r"`benchmarks/(bench_[a-z0-9_]+\.py)`", paragraph))
    assert named == {path.name for path in (repo_root / "benchmarks").glob("bench_*.py")}

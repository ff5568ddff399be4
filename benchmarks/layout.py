"""The shape of envkit/ and recipes/: the figures issue 18's closing note asks for, from the code.

Prints modules at envkit/'s top level, each package's modules and lines, the deepest import
chain inside envkit (longest path in grimp's import graph, function-level imports included),
import cycles, the largest module, and the recipes' lines.

usage: python benchmarks/layout.py [REPO]   (REPO defaults to this checkout; give an old worktree to compare)
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import grimp


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def main() -> int:
    repo = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent).resolve()
    sys.path.insert(0, str(repo))
    package = repo / "envkit"
    top = sorted(path.name for path in package.glob("*.py"))
    print(f"modules at envkit/'s top level: {len(top)} ({', '.join(top)})")
    for folder in sorted(p for p in package.iterdir() if (p / "__init__.py").is_file()):
        modules = sorted(folder.glob("*.py"))
        print(f"  envkit/{folder.name}/: {len(modules)} modules, {sum(map(lines, modules))} lines")
    graph = grimp.build_graph("envkit")

    on_path: set[str] = set()

    @cache
    def deepest(module: str) -> tuple[str, ...]:
        # An import back onto the current chain would close a cycle: the chain stops there.
        on_path.add(module)
        below = [
            deepest(imported) for imported in graph.find_modules_directly_imported_by(module) if imported not in on_path
        ]
        on_path.discard(module)
        return (module, *max(below, key=len, default=()))

    sys.setrecursionlimit(10000)
    cycles = sorted(
        {
            tuple(sorted((a, b)))
            for a in graph.modules
            for b in graph.find_modules_directly_imported_by(a)
            if graph.find_shortest_chain(importer=b, imported=a)
        }
    )
    print(
        f"import cycles: {len(cycles)}" + (f" ({'; '.join(' <-> '.join(pair) for pair in cycles)})" if cycles else "")
    )
    chain = max((deepest(module) for module in sorted(graph.modules)), key=len)
    print(f"deepest import chain: {len(chain)} modules ({' -> '.join(chain)})")
    every = sorted(package.rglob("*.py"), key=lines)
    print(f"largest module: {every[-1].relative_to(repo)} ({lines(every[-1])} lines)")
    recipes = repo / "recipes"
    for path in sorted(recipes.rglob("*.py")):
        print(f"  {path.relative_to(repo)}: {lines(path)} lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

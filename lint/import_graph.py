"""The product's import graph in figures: modules, import edges, edges that run upward
against the layers `pyproject.toml`'s contracts name, and import cycles.

Run: `.venv/bin/python -m lint.import_graph` (prints one line per figure, then each upward
edge and each cycle). Built on grimp, the graph import-linter checks its contracts on.
"""

from __future__ import annotations

import sys

import grimp

PACKAGES = ("provisioner", "stacks", "infra")
# Highest first: a module may import only modules of its own layer or below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("provisioner.commands",),
    ("provisioner.assembly",),
    ("provisioner.controllers",),
    ("provisioner.pulumi_driver",),
    ("provisioner.kube", "provisioner.cloud"),
    ("provisioner.api",),
)


def _layer(module: str) -> int | None:
    for depth, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return depth
    return None


def main() -> int:
    graph = grimp.build_graph(*PACKAGES)
    modules = sorted(graph.modules)
    edges = [
        (importer, imported)
        for importer in modules
        for imported in graph.find_modules_directly_imported_by(importer)
        if imported in graph.modules
    ]
    upward = upward_edges(edges)
    cycles = cycles_of(modules, edges)
    print(f"modules: {len(modules)}")
    print(f"import edges: {len(edges)}")
    print(f"edges that run upward: {len(upward)}")
    print(f"cycles: {len(cycles)}")
    for importer, imported in upward:
        print(f"  upward: {importer} -> {imported}")
    for cycle in cycles:
        print("  cycle: " + " -> ".join(cycle))
    return 0


def upward_edges(edges: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The edges whose importer sits in a lower layer than what it imports."""
    upward = []
    for importer, imported in edges:
        a, b = _layer(importer), _layer(imported)
        if a is not None and b is not None and b < a:
            upward.append((importer, imported))
    return upward


def cycles_of(modules: list[str], edges: list[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    out: dict[str, list[str]] = {m: [] for m in modules}
    for a, b in edges:
        out[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in out[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for m in modules:
        if m not in index:
            visit(m)
    return found


if __name__ == "__main__":
    sys.exit(main())

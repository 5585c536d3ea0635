"""The package's import graph has no cycles: every module can be read after the ones it imports.

import-linter (``lint-imports``, in ``make lint``) checks that the layers only import
downwards; this test checks what it does not, that no two modules of one layer import each
other either, lazy imports inside functions included (imports only for type checking are
left out: they never run).
"""

from __future__ import annotations

import pytest

grimp = pytest.importorskip("grimp")  # installed with import-linter (the test extra)


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_finder_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(edges) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = grimp.build_graph("qkenergy", include_external_packages=False, exclude_type_checking_imports=True)
    edges = {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}
    assert strongly_connected(edges) == []

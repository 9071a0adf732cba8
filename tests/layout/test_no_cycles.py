"""The shell's modules import each other without cycles, lazy imports included.

import-linter's layers contract (``pyproject.toml``, run by ``make test``) enforces the
direction between packages; this test makes sure no cycle hides inside a package or behind an
import inside a function either (grimp sees those too).
"""

from __future__ import annotations

import grimp


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the groups of modules that reach each other (size > 1 is a cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_no_module_of_the_scheduler_is_part_of_an_import_cycle():
    imports = grimp.build_graph("scheduler", cache_dir=None)
    modules = {m for m in imports.modules if m.startswith("scheduler")}
    graph = {m: {i for i in imports.find_modules_directly_imported_by(m) if i in modules} for m in modules}
    cycles = [group for group in strongly_connected(graph) if len(group) > 1]
    assert cycles == []

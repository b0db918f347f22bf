"""Import layering of the package, type-checking imports included (grimp builds the import graph from the source).

* The lower layers -- ``rollouthub.types``, ``rollouthub.store``, ``rollouthub.utils`` -- import nothing from the
  upper ones (``runner``, ``trainer``, ``algorithm``, ``llm_proxy``), not even under ``TYPE_CHECKING``.
* No import cycle beyond the known ones listed in :data:`KNOWN_CYCLES` (each with the reason it is still there): a new
  cycle -- e.g. between the server modules, ``algorithm.base`` and ``trainer``, ``emitter`` and ``tracer`` -- fails.
"""

from __future__ import annotations

from typing import Dict, List, Set

import pytest

grimp = pytest.importorskip("grimp")

LOWER = ("rollouthub.types", "rollouthub.store", "rollouthub.utils")
UPPER = ("rollouthub.runner", "rollouthub.trainer", "rollouthub.algorithm", "rollouthub.llm_proxy")

KNOWN_CYCLES = [
    # The SQL backend's engine, primitives, write batches and compound reads name the collections class (and each
    # other's unit and batch types) in type annotations; at run time the collections module imports them, not the
    # other way round.
    {
        "rollouthub.store.collection.sql",
        "rollouthub.store.collection.sql_batch",
        "rollouthub.store.collection.sql_compound",
        "rollouthub.store.collection.sql_engine",
        "rollouthub.store.collection.sql_primitives",
    },
    # The LLM proxy's modules call each other at run time (proxy <-> engine <-> middleware <-> exporter).
    {
        "rollouthub.llm_proxy.callbacks",
        "rollouthub.llm_proxy.engine",
        "rollouthub.llm_proxy.exporter",
        "rollouthub.llm_proxy.middleware",
        "rollouthub.llm_proxy.proxy",
        "rollouthub.llm_proxy.spans",
    },
]


@pytest.fixture(scope="module")
def graph() -> Dict[str, Set[str]]:
    built = grimp.build_graph("rollouthub", include_external_packages=False, exclude_type_checking_imports=False)
    return {module: set(built.find_modules_directly_imported_by(module)) for module in built.modules}


def _cycles(graph: Dict[str, Set[str]]) -> List[Set[str]]:
    """Strongly connected components with more than one module (iterative Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    result: List[Set[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(component)
    return result


def test_lower_layers_import_no_upper_layer(graph: Dict[str, Set[str]]) -> None:
    wrong = sorted(
        f"{module} -> {imported}"
        for module, imports in graph.items()
        if module.startswith(LOWER)
        for imported in imports
        if imported.startswith(UPPER)
    )
    assert wrong == []


def test_no_new_import_cycle(graph: Dict[str, Set[str]]) -> None:
    unexpected = [sorted(cycle) for cycle in _cycles(graph) if cycle not in KNOWN_CYCLES]
    assert unexpected == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]

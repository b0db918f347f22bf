"""Import layering of the package: every import anywhere in a module (inside functions and under ``TYPE_CHECKING``
included) goes down or sideways, never up; and no import cycle beyond the known ones.

* :data:`TIERS` orders the packages from the bottom up. A module may import modules of its own tier and of the tiers
  below; an import of a higher tier fails the test (naming the file, line and both modules), unless it is one of the
  compatibility aliases of :data:`ALLOWED_UPWARD` -- each with its reason, and each only inside a function (resolved
  on first use, never at import time). The tiers come from the source's AST (:func:`imports_of`), not from importing
  it, so imports inside functions count as much as top-level ones.
* Every module of the package must have a tier: a new package has to be placed (and so decided) explicitly.
* No import cycle beyond the known ones listed in :data:`KNOWN_CYCLES` (each with the reason it is still there): a new
  cycle -- e.g. between the server modules, ``algorithm.base`` and ``trainer``, ``emitter`` and ``tracer`` -- fails
  (grimp builds the module graph).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest

import rollouthub

grimp = pytest.importorskip("grimp")

PACKAGE_DIR = Path(rollouthub.__file__).parent

TIERS: List[Tuple[str, ...]] = [
    # Foundations: the data model and leaf helpers that import nothing else of the package.
    ("rollouthub.types", "rollouthub.semconv", "rollouthub.env_var", "rollouthub.logging", "rollouthub.config"),
    # Generic helpers: nothing from the store or above.
    ("rollouthub.utils",),
    # The store: contract, business logic, collections, backends, client, wire models (not its server).
    ("rollouthub.store",),
    # Tracing, instrumentation, emitting and adapting spans.
    ("rollouthub.tracer", "rollouthub.instrumentation"),
    ("rollouthub.emitter",),
    ("rollouthub.adapter", "rollouthub.reward"),
    # Training-data export: reads a store, never its server.
    ("rollouthub.export",),
    # The store server serves the store, OTLP ingestion, the export routes and the dashboard: above the export package.
    ("rollouthub.store.server", "rollouthub.store.client_server"),
    # Runtime components.
    ("rollouthub.runner", "rollouthub.llm_proxy", "rollouthub.execution"),
    ("rollouthub.algorithm", "rollouthub.testing"),
    ("rollouthub.trainer",),
    ("rollouthub.litagent",),
    # Applications and the package's own namespace.
    (
        "rollouthub",
        "rollouthub.__main__",
        "rollouthub.cli",
        "rollouthub.quickstart",
        "rollouthub.rl_demo",
        "rollouthub.legacy_v01",
        "rollouthub.client",
        "rollouthub.server",
    ),
]
"""Packages (and top-level modules) from the bottom tier up; a module belongs to its longest listed prefix."""

ALLOWED_UPWARD: Dict[Tuple[str, str], str] = {
    ("rollouthub.utils.otlp", "rollouthub.store.server.otlp"): (
        "the reference exports the server-side handle_otlp_export from utils.otlp (a module __getattr__ alias)"
    ),
    ("rollouthub.utils.otlp", "rollouthub.store.server.otlp_decode"): (
        "the reference exports the server-side spans_from_proto and PROTOBUF_CT from utils.otlp (a module "
        "__getattr__ alias)"
    ),
    ("rollouthub.store", "rollouthub.store.client_server"): (
        "the reference exports LightningStoreServer from the store package (a module __getattr__ alias)"
    ),
}
"""Upward imports that stay, as ``(importer, imported module)``: compatibility aliases resolved on first access."""

KNOWN_CYCLES = [
    # The SQL backend's engine, primitives, write batches and compound reads name the collections class (and each
    # other's unit and batch types) in type annotations; at run time the collections module imports them, not the
    # other way round.
    {
        "rollouthub.store.collection.sql",
        "rollouthub.store.collection.sql_batch",
        "rollouthub.store.collection.sql_compound",
        "rollouthub.store.collection.sql_engine",
        "rollouthub.store.collection.sql_key_value",
        "rollouthub.store.collection.sql_primitives",
        "rollouthub.store.collection.sql_queue",
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


def test_no_new_import_cycle(graph: Dict[str, Set[str]]) -> None:
    unexpected = [sorted(cycle) for cycle in _cycles(graph) if cycle not in KNOWN_CYCLES]
    assert unexpected == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


# ---------------------------------------------------------------------------------------------------------------------
# Tiers (from the AST of every module)
# ---------------------------------------------------------------------------------------------------------------------


def module_files(package_dir: Path = PACKAGE_DIR) -> Dict[str, Tuple[Path, bool]]:
    """Every module of the package: dotted name -> (file, whether it is a package's ``__init__``)."""
    modules: Dict[str, Tuple[Path, bool]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def imports_of(
    module: str, source: str, is_package: bool, known: Set[str], root: str = "rollouthub"
) -> Iterator[Tuple[str, int, bool]]:
    """The imports of package modules anywhere in ``source`` (a module's text): ``(module, line, inside a function)``.

    ``import a.b``, ``from a import b`` (``a.b`` when it is a module of ``known``, else ``a``), relative imports, and
    ``importlib.import_module("a.b")`` / ``__import__("a.b")`` with a literal name; nested in functions, classes,
    ``if TYPE_CHECKING`` or ``try`` blocks alike."""

    def visit(node: ast.AST, in_function: bool) -> Iterator[Tuple[str, int, bool]]:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for name in _imported_names(module, child, is_package, known):
                if name == root or name.startswith(root + "."):
                    yield name, getattr(child, "lineno", 0), in_function
            yield from visit(child, nested)

    yield from visit(ast.parse(source), False)


def _imported_names(module: str, node: ast.AST, is_package: bool, known: Set[str]) -> List[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        return [f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in known else prefix for alias in node.names]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
            return [node.args[0].value]
    return []


def tier_of(module: str) -> int:
    """The tier of ``module``: that of its longest prefix in :data:`TIERS` (``-1`` when it has none)."""
    best, tier = -1, -1
    for index, prefixes in enumerate(TIERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, tier = len(prefix), index
    return tier


@pytest.fixture(scope="module")
def imports() -> Dict[str, List[Tuple[str, int, bool]]]:
    modules = module_files()
    known = set(modules)
    return {
        module: list(imports_of(module, path.read_text(encoding="utf-8"), is_package, known))
        for module, (path, is_package) in modules.items()
    }


def test_every_module_has_a_tier() -> None:
    assert [module for module in module_files() if tier_of(module) < 0] == []


def test_no_module_imports_a_higher_tier(imports: Dict[str, List[Tuple[str, int, bool]]]) -> None:
    wrong = []
    used_aliases = set()
    for module, found in imports.items():
        for imported, line, in_function in found:
            if tier_of(imported) <= tier_of(module):
                continue
            if (module, imported) in ALLOWED_UPWARD and in_function:
                used_aliases.add((module, imported))
                continue
            wrong.append(f"{module} (line {line}) -> {imported}")
    assert sorted(wrong) == []
    assert used_aliases == set(ALLOWED_UPWARD)  # an alias that went away leaves the list too


@pytest.mark.parametrize(
    ("lower", "upper"),
    [
        ("rollouthub.utils", "rollouthub.store"),
        ("rollouthub.store.base", "rollouthub.store.server.app"),
        ("rollouthub.export.stream", "rollouthub.store.server.export"),
        ("rollouthub.types", "rollouthub.utils"),
        ("rollouthub.store", "rollouthub.runner"),
        ("rollouthub.store.server", "rollouthub.trainer"),
    ],
)
def test_the_tiers_put_lower_below_upper(lower: str, upper: str) -> None:
    assert tier_of(lower) < tier_of(upper)


def test_imports_inside_functions_and_type_checking_blocks_are_found() -> None:
    source = """
from typing import TYPE_CHECKING
import rollouthub.types
from . import sibling
from ..store import base
if TYPE_CHECKING:
    from rollouthub.trainer import Trainer
def late():
    from rollouthub.store.server.otlp import otlp_routes
    import importlib
    return importlib.import_module("rollouthub.export.stream")
class Holder:
    def method(self):
        import rollouthub.runner.agent
"""
    known = {"rollouthub.utils.sibling", "rollouthub.store.base", "rollouthub.trainer"}
    found = list(imports_of("rollouthub.utils.mod", source, False, known))
    assert found == [
        ("rollouthub.types", 3, False),
        ("rollouthub.utils.sibling", 4, False),
        ("rollouthub.store.base", 5, False),
        ("rollouthub.trainer", 7, False),
        ("rollouthub.store.server.otlp", 9, True),
        ("rollouthub.export.stream", 11, True),
        ("rollouthub.runner.agent", 14, True),
    ]

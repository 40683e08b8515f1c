"""No import cycles: between the modules of each package, and between packages.

The layering rules (tests/test_layering.py) forbid named edges; a cycle needs no forbidden
edge, so it is caught here. Every import counts, lazy ones inside functions included, except
those under `if TYPE_CHECKING:` (they never run). A failure names each cycle's modules and the
edges that close it; the usual cut is a small leaf both sides import, or passing the fields a
function reads instead of the object that holds them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.helpers import REPO

TOPS = ("stages", "analysis", "bench_defs", "perf")
"""The packages walked: everything of ours that is imported, not run as a test."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for top in TOPS for p in sorted((REPO / top).rglob("*.py"))}


def _type_checking(test: ast.expr) -> bool:
    name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
    return name == "TYPE_CHECKING"


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """Dotted names imported anywhere in `tree`, `if TYPE_CHECKING:` bodies left out."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                yield from _imported_names(
                    ast.Module(body=[child], type_ignores=[]), module, is_package
                )
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:  # `from a import b`: the module a.b where there is one
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
        yield from _imported_names(node, module, is_package)


def _ours(name: str) -> str | None:
    """The module of ours that importing `name` runs last (a.b.c -> a.b for a name in a.b)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def module_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        names = _imported_names(tree, module, path.name == "__init__.py")
        graph[module] = {m for m in map(_ours, names) if m is not None and m != module}
    return graph


def package_of(module: str) -> str:
    """A module's package at the depth the layering speaks of: `stages.<sub>`, else the top
    package (`analysis`, `bench_defs.<sub>`, `perf`); a module at the top of `stages` is its
    own node (settings, process_groups...)."""
    parts = module.split(".")
    if MODULES[module].name != "__init__.py":
        parts = parts[:-1] if len(parts) > 2 or parts[0] != "stages" else parts
    return ".".join(parts[:2])


def package_graph(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for module, imported in graph.items():
        source = package_of(module)
        packages.setdefault(source, set()).update(
            package_of(m) for m in imported if package_of(m) != source
        )
    return packages


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            component.append(node)
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _described(graph: Mapping[str, set[str]], members: list[str]) -> str:
    edges = [f"{a} -> {b}" for a in members for b in sorted(graph.get(a, ())) if b in members]
    return f"{' <-> '.join(members)} ({'; '.join(edges)})"


@pytest.mark.slow
def test_no_module_imports_itself_back_through_others() -> None:
    graph = module_graph()
    assert [_described(graph, c) for c in cycles(graph)] == []


def test_no_package_imports_itself_back_through_others() -> None:
    graph = package_graph(module_graph())
    assert [_described(graph, c) for c in cycles(graph)] == []


def test_a_cycle_is_found_and_a_type_only_import_is_not(tmp_path: Path) -> None:
    """The walker on a graph written here: a lazy import closes a cycle, TYPE_CHECKING does not."""
    lazy = ast.parse("def f():\n    from stages.settings import x\n")
    type_only = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import stages.settings\n"
    )
    assert "stages.settings" in set(_imported_names(lazy, "stages.x", False))
    assert "stages.settings" not in set(_imported_names(type_only, "stages.x", False))
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]

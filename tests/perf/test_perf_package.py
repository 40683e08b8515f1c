"""`perf/` is a package run as `python -m perf.<name>` (its studies as
`python -m perf.studies.<name>`): the scripts reach their helpers and each other as
`perf.<name>`, and no code in the repository edits `sys.path` to find a module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

PERF = REPO / "perf"
SCRIPTS = sorted(
    ".".join(path.relative_to(PERF).with_suffix("").parts)
    for path in PERF.rglob("*.py")
    if path.stem != "__init__"
)
"""The modules under perf/, dotted below it (`common`, `studies.hot_path_costs`)."""
TOP_NAMES = {name.split(".")[0] for name in SCRIPTS}
"""What a bare import of a perf module would start with (`common`, `studies`)."""


def _assigned_or_called(node: ast.AST) -> list[ast.expr]:
    """What `node` assigns to, or the object whose method it calls."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return [node.func.value]  # sys.path.insert(...), sys.path.append(...)
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, ast.AugAssign):
        return [node.target]
    return []


def _sys_path_edits(path: Path) -> list[int]:
    """Lines of `path` that change `sys.path` (a call on it, or an assignment to it)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.stmt | ast.expr)
        and any(ast.unparse(target).startswith("sys.path") for target in _assigned_or_called(node))
    )


def test_no_module_edits_sys_path() -> None:
    folders = ("perf", "tests", "stages", "analysis", "bench_defs")
    modules = [path for folder in folders for path in sorted((REPO / folder).rglob("*.py"))]
    assert len(modules) > 100  # the walk finds the tree
    edits = {
        str(path.relative_to(REPO)): lines
        for path in modules
        if "sys.path" in path.read_text() and (lines := _sys_path_edits(path))
    }
    assert not edits, f"sys.path edited at {edits}: run scripts with -m, import by package"


def test_the_detector_sees_each_form_of_edit(tmp_path: Path) -> None:
    module = tmp_path / "edits.py"
    module.write_text(
        "import sys\nsys.path.insert(0, 'a')\nsys.path += ['b']\nsys.path = []\nprint(sys.path)\n"
    )
    assert _sys_path_edits(module) == [2, 3, 4]


def test_scripts_import_their_siblings_through_the_package() -> None:
    assert {"common", "capacity_search_cost", "stage_overhead", "studies.hot_path_costs"} <= set(
        SCRIPTS
    )
    bare: dict[str, list[str]] = {}
    for name in SCRIPTS:
        tree = ast.parse((PERF / f"{name.replace('.', '/')}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module.split(".")[0]]
            else:
                continue
            if found := [n for n in names if n in TOP_NAMES]:
                bare.setdefault(name, []).extend(found)
    assert not bare, f"import these as `from perf import ...`: {bare}"


@pytest.mark.spawns
def test_every_script_imports_as_a_module_of_the_package_from_the_repository_root() -> None:
    """What `python -m perf.<name>` needs: each module imports with only the working directory
    (the repository root) on the path, in a fresh interpreter."""
    imports = "; ".join(f"import perf.{name}" for name in SCRIPTS)
    child = subprocess.run(
        [sys.executable, "-c", f"{imports}; print('imported')"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert child.returncode == 0 and child.stdout.strip() == "imported", child.stderr[-3000:]

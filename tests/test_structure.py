"""The structure targets of docs/design.md ("Size limits"): in `stages/` and `bench_defs/` no
module over 400 lines and no function over 60 lines (ruff's C901 holds complexity at 10)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("stages", "bench_defs")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (REPO / package).rglob("*.py"))


def test_the_packages_have_modules() -> None:
    assert len(_modules()) > 50  # the walk finds the tree (a wrong REPO would pass vacuously)


def test_no_module_is_over_the_limit() -> None:
    too_long = {
        str(path.relative_to(REPO)): lines
        for path in _modules()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines: {too_long}"


def test_no_function_is_over_the_limit() -> None:
    too_long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_long[f"{path.relative_to(REPO)}:{node.lineno} {node.name}"] = lines
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines: {too_long}"

"""The structure targets of docs/design.md ("Size limits"): in `stages/`, `bench_defs/`,
`analysis/` and `perf/` (its studies included) no module over 400 lines and no function over 60
lines (ruff's C901 holds complexity at 10 there: pyproject.toml); the GPU acceptance check
(`tests/gpu/`, run by `make gpu-check`) keeps to the same sizes."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("stages", "bench_defs", "analysis", "perf")
SIZED = (*PACKAGES, "tests/gpu")
"""The folders held to the size limits: the packages, and the GPU check that was in perf/."""
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(path for folder in SIZED for path in (REPO / folder).rglob("*.py"))


def test_the_packages_have_modules() -> None:
    assert len(_modules()) > 50  # the walk finds the tree (a wrong REPO would pass vacuously)
    walked = {path.relative_to(REPO).parts[:2] for path in _modules()}
    assert {("perf", "studies"), ("tests", "gpu")} <= walked  # perf/ and its studies are in it


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


def test_complexity_is_limited_in_every_package() -> None:
    """ruff's C901 is not switched off for any of the packages (pyproject's per-file-ignores)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    ignores = config["tool"]["ruff"]["lint"]["per-file-ignores"]
    assert "C90" in config["tool"]["ruff"]["lint"]["select"]
    exempt = {
        pattern
        for pattern, rules in ignores.items()
        if "C901" in rules and pattern.split("/")[0] in PACKAGES
    }
    assert not exempt, f"C901 switched off for {sorted(exempt)}"

"""docs/architecture.md is the page a newcomer reads first, held true to the code: its package
table names every package there is (and nothing that is not), each with its role; its layer
diagram is there; every path its "where to add things" table names exists."""

from __future__ import annotations

import re

from tests.helpers import REPO

ARCHITECTURE = REPO / "docs" / "architecture.md"
DESCRIBED_ROOTS = ("stages", "analysis", "bench_defs", "perf")
"""The top-level packages whose every package (folder with `__init__.py`) the table names."""
_ROW = re.compile(r"^\|\s*`(?P<path>[\w/]+/)`\s*\|\s*(?P<role>[^|]*?)\s*\|\s*$")
_PATH = re.compile(r"`((?:stages|analysis|bench_defs|perf|docs|tests)/[\w./]*|pyproject\.toml)`")


def _section(title: str) -> str:
    text = ARCHITECTURE.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _package_rows() -> dict[str, str]:
    """The package table's rows: path (`stages/runtime/`) -> the role it states."""
    rows = {}
    for line in _section("Each package in a line").splitlines():
        if match := _ROW.match(line):
            rows[match["path"]] = match["role"]
    return rows


def _packages() -> set[str]:
    """Every package under the described roots, as `root/sub/`."""
    found = set()
    for root in DESCRIBED_ROOTS:
        for init in (REPO / root).rglob("__init__.py"):
            found.add(init.parent.relative_to(REPO).as_posix() + "/")
    return found


def test_the_package_table_names_every_package_and_nothing_else() -> None:
    rows = _package_rows()
    assert {"stages/", "stages/runtime/", "analysis/", "bench_defs/"} <= set(rows), sorted(rows)
    packages = _packages()
    assert not packages - set(rows), (
        f"architecture.md does not name: {sorted(packages - rows.keys())}"
    )
    assert not set(rows) - packages, (
        f"architecture.md names no package: {sorted(rows.keys() - packages)}"
    )


def test_every_package_has_a_role() -> None:
    short = [path for path, role in _package_rows().items() if len(role.split()) < 3]
    assert not short, f"architecture.md gives these no role: {short}"


def test_the_layer_diagram_is_mermaid_and_draws_the_three_packages() -> None:
    text = ARCHITECTURE.read_text()
    diagram = text.split("```mermaid", 1)[1].split("```", 1)[0]
    for package in ("stages", "analysis", "bench_defs"):
        assert package in diagram
    assert "-->" in diagram


def test_every_path_the_where_to_add_table_names_exists() -> None:
    named = _PATH.findall(_section("Where to add things"))
    assert len(named) >= 8, named
    missing = [path for path in named if not (REPO / path.split("#")[0]).exists()]
    assert not missing, f"architecture.md's where-to-add table names missing paths: {missing}"


def test_design_md_points_here_instead_of_indexing_modules() -> None:
    design = (REPO / "docs" / "design.md").read_text()
    assert "architecture.md" in design
    assert not re.search(r"^  \w+\.py\s{2,}", design, re.MULTILINE), "a module index is back"

"""One class per name across stages/, analysis/ and bench_defs/: a name found by grep is the
class meant, and two classes for one role (three RunRecords) cannot creep back in."""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache

from tests.helpers import REPO

PACKAGES = ("stages", "analysis", "bench_defs")


@cache
def _class_definitions() -> dict[str, list[str]]:
    """Every class name in the packages -> where it is defined (`path:line`)."""
    found: dict[str, list[str]] = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    found[node.name].append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_the_walk_finds_the_classes() -> None:
    assert len(_class_definitions()) > 100  # a wrong REPO would pass the next test vacuously


def test_no_two_classes_share_a_name() -> None:
    shared = {name: places for name, places in _class_definitions().items() if len(places) > 1}
    assert not shared, f"classes sharing a name: {shared}"

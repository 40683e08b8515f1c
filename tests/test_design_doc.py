"""docs/design.md's layering table states exactly the rules tests/test_layering.py checks: a new
rule is one line of the design away from green. (The package map is docs/architecture.md,
tests/test_architecture_doc.py.)"""

from __future__ import annotations

import re

from tests.helpers import REPO
from tests.test_layering import RULES, ImportRule

DESIGN = REPO / "docs" / "design.md"


def _section(title: str) -> str:
    text = DESIGN.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _table_rules() -> set[ImportRule]:
    """The rows of the layering table: package | may not import | except."""
    rules = set()
    for line in _section("Layering").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        package, forbidden, allowed = (tuple(re.findall(r"`([^`]+)`", cell)) for cell in cells)
        rules.add(ImportRule(package[0], forbidden, allowed))
    return rules


def test_the_layering_table_states_the_layering_tests_rules() -> None:
    table = _table_rules()
    checked = set(RULES)
    assert table, "no rows read from docs/design.md's layering table"
    assert table == checked, (
        f"in the design, not checked: {sorted(table - checked)}; "
        f"checked, not in the design: {sorted(checked - table)}"
    )

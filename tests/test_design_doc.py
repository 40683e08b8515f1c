"""docs/design.md states the architecture true to the code: its tree names every package and
module that exists (and nothing that does not), and its layering table states exactly the rules
tests/test_layering.py checks. A new module or rule is one line of the design away from green."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import REPO
from tests.test_layering import RULES, ImportRule

DESIGN = REPO / "docs" / "design.md"
DESCRIBED_PACKAGES = ("stages", "analysis", "bench_defs")
"""The packages whose every module the tree names."""
_ENTRY = re.compile(r"^(?P<indent> {0,2})(?P<name>\w+(?:/|\.py))\s+(?P<text>.*)$")
_CONTINUATION = re.compile(r"^\s{6,}(?P<text>\S.*)$")


@dataclass
class TreeEntry:
    """One entry of the architecture tree: a path and what the design says of it."""

    path: str
    text: list[str] = field(default_factory=list)

    def says(self, name: str) -> bool:
        return re.search(rf"(?<![\w/]){re.escape(name)}(?!\w)", " ".join(self.text)) is not None


def _section(title: str) -> str:
    text = DESIGN.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _tree() -> dict[str, TreeEntry]:
    """The entries of the fenced tree under "## Architecture", by path (`stages/spec/`)."""
    block = _section("Architecture").split("```")[1]
    entries: dict[str, TreeEntry] = {}
    parent = ""
    current: TreeEntry | None = None
    for line in block.splitlines():
        if match := _ENTRY.match(line):
            name = match["name"]
            path = name if not match["indent"] else parent + name
            if not match["indent"]:
                parent = name
            current = entries.setdefault(path, TreeEntry(path))
            current.text.append(match["text"])
        elif (continued := _CONTINUATION.match(line)) and current is not None:
            current.text.append(continued["text"])
    return entries


def _children(folder: Path) -> tuple[list[str], list[str]]:
    """A folder's Python subpackages (`name/`) and modules (`name.py`), sorted."""
    packages = sorted(
        f"{path.name}/" for path in folder.iterdir() if (path / "__init__.py").is_file()
    )
    modules = sorted(
        path.name for path in folder.glob("*.py") if path.name not in ("__init__.py", "__main__.py")
    )
    return packages, modules


def test_the_tree_is_read() -> None:
    tree = _tree()
    assert {"stages/", "stages/runtime/", "analysis/", "bench_defs/"} <= set(tree), sorted(tree)


def test_every_path_in_the_tree_exists() -> None:
    missing = [path for path in _tree() if not (REPO / path).exists()]
    assert not missing, f"docs/design.md's tree names paths that do not exist: {missing}"


def test_the_tree_names_every_package_and_module() -> None:
    """stages/ lists its subpackages and top-level modules as entries; each entry names the
    modules and subpackages inside it (stem or `name/`); analysis/ and bench_defs/ name theirs
    in their text."""
    tree = _tree()
    unnamed: list[str] = []
    for package in DESCRIBED_PACKAGES:
        packages, modules = _children(REPO / package)
        entry = tree[f"{package}/"]
        for child in packages + modules:
            as_entry = f"{package}/{child}"
            if as_entry in tree:
                continue
            if package == "stages" or not entry.says(child.removesuffix(".py")):
                unnamed.append(as_entry)
    for path, entry in tree.items():
        if path.count("/") < 2 or not path.endswith("/"):
            continue
        packages, modules = _children(REPO / path)
        unnamed += [
            f"{path}{child}"
            for child in packages + modules
            if not entry.says(child.removesuffix(".py"))
        ]
    assert not unnamed, f"docs/design.md's architecture tree does not name: {sorted(unnamed)}"


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

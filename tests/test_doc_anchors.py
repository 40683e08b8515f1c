"""Every pointer into the README or docs/ names a section that exists.

Code, SQL and docs point at sections two ways: a link (`docs/design.md#the-warehouse`,
`[x](#a-benchmark-spec)`) or prose (`README, "A benchmark spec"`). Sections move between files;
this test fails on the pointer left behind, naming its file and line.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = {"README.md": ROOT / "README.md"} | {
    path.name: path for path in sorted((ROOT / "docs").glob("*.md"))
}
SCANNED_SUFFIXES = {".py", ".sql", ".md", ".yaml", ".toml"}
SCANNED_ROOTS = ("stages", "analysis", "bench_defs", "perf", "tests", "docs", "specs", "deploy")

# A markdown file's name, `#` and an anchor (a link's target or a bare mention, with or without
# `docs/`); the file part is matched by its name.
LINK = re.compile(r"(?P<file>(?:docs/)?(?:README|[a-z_]+)\.md)#(?P<anchor>[A-Za-z0-9_-]+)")
# `](#anchor)`: a link to a section of the same markdown file.
SAME_FILE_LINK = re.compile(r"\]\(#(?P<anchor>[A-Za-z0-9_-]+)\)")
# `README, "A benchmark spec"`, `docs/design.md, "Verdicts across runs"`.
PROSE = re.compile(
    r"(?P<file>README|(?:docs/)?(?:README|design|contracts|stages|architecture)\.md)"
    r"(?:'s)?,? \"(?P<heading>[^\"]+)\""
)
HEADING = re.compile(r"^#{1,6} +(?P<text>.+?) *$")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.lower())
    return text.replace(" ", "-")


def _headings(path: Path) -> tuple[set[str], set[str]]:
    """The anchors (duplicates numbered as GitHub does) and the plain heading texts of a file."""
    anchors: set[str] = set()
    texts: set[str] = set()
    seen: dict[str, int] = {}
    in_fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        match = None if in_fence else HEADING.match(line)
        if match is None:
            continue
        text = match.group("text")
        texts.add(text.replace("`", ""))
        slug = _slug(text)
        count = seen.get(slug, 0)
        anchors.add(slug if count == 0 else f"{slug}-{count}")
        seen[slug] = count + 1
    return anchors, texts


def _scanned_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "Makefile"]
    for top in SCANNED_ROOTS:
        files += [
            path
            for path in sorted((ROOT / top).rglob("*"))
            if path.suffix in SCANNED_SUFFIXES and path.is_file()
        ]
    return files


def _dangling() -> list[str]:
    sections = {name: _headings(path) for name, path in DOCS.items()}
    problems: list[str] = []
    for path in _scanned_files():
        where_file = path.relative_to(ROOT)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{where_file}:{number}"
            for match in LINK.finditer(line):
                name = Path(match.group("file")).name
                if name in sections and match.group("anchor") not in sections[name][0]:
                    problems.append(f"{where}: no section #{match.group('anchor')} in {name}")
            if path.name in sections:
                for match in SAME_FILE_LINK.finditer(line):
                    if match.group("anchor") not in sections[path.name][0]:
                        problems.append(f"{where}: no section #{match.group('anchor')} here")
            for match in PROSE.finditer(line):
                name = Path(match.group("file")).name
                name = "README.md" if name == "README" else name
                if name in sections and match.group("heading") not in sections[name][1]:
                    problems.append(f'{where}: no section "{match.group("heading")}" in {name}')
    return problems


def test_every_pointer_into_the_docs_names_a_section_that_exists() -> None:
    assert _dangling() == []


def test_a_moved_section_is_caught(tmp_path: Path) -> None:
    """The slug rule agrees with GitHub's on the headings this project writes."""
    doc = tmp_path / "x.md"
    doc.write_text("# A `collobench run`, again\n## Scale-out\n## Scale-out\n```\n# not one\n```\n")
    anchors, texts = _headings(doc)
    assert anchors == {"a-collobench-run-again", "scale-out", "scale-out-1"}
    assert texts == {"A collobench run, again", "Scale-out"}

"""docs/ stays true to the code: every warehouse view and macro, CLI command and option, spec
field and run-directory column is named in docs/contracts.md; the README links the design and
the contracts; links between the documents resolve; servers the docs start bind loopback.

Each test collects what the code defines (parsing the SQL, walking the typer app and the pydantic
models) and fails with the list of what docs/contracts.md does not mention, so a new field or view
is one line of documentation away from green.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel

from tests.helpers import REPO

DOCS = REPO / "docs"
CONTRACTS = DOCS / "contracts.md"
DESIGN = DOCS / "design.md"
SQL_ROOT = REPO / "analysis" / "sql"

_CREATED = re.compile(
    r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+)?(VIEW|MACRO)\s+"
    r"(?:IF\s+NOT\s+EXISTS\s+)?([A-Za-z_][\w]*)",
    re.IGNORECASE,
)
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _contracts() -> str:
    return CONTRACTS.read_text()


def _missing(names: typing.Iterable[str], text: str) -> list[str]:
    """The names that do not appear in `text` between backticks (`name`, or `name` followed by
    more inside the same backticks, as in `collobench run SPEC`)."""
    return sorted(
        {name for name in names if not re.search(rf"`{re.escape(name)}(`|[\s\[(])", text)}
    )


def _report(what: str, missing: list[str]) -> str:
    return f"{len(missing)} {what} not documented in docs/contracts.md: " + ", ".join(missing)


# --------------------------------------------------------------------------- warehouse


def _sql_objects(kind: str) -> set[str]:
    found = set()
    for path in SQL_ROOT.rglob("*.sql"):
        if "migrations" in path.parts:
            continue  # migrations replay history; the live objects are in the other files
        text = re.sub(r"--[^\n]*", "", path.read_text())
        found |= {name for k, name in _CREATED.findall(text) if k.upper() == kind}
    return found


def test_every_warehouse_view_is_documented() -> None:
    views = _sql_objects("VIEW")
    assert len(views) >= 20, views  # the parser found the views at all
    missing = _missing(views, _contracts())
    assert not missing, _report("views", missing)


def test_every_sql_macro_is_documented() -> None:
    macros = _sql_objects("MACRO")
    assert "loadgen_quantile" in macros, macros
    missing = _missing(macros, _contracts())
    assert not missing, _report("SQL macros", missing)


# --------------------------------------------------------------------------- CLI


def _commands(group: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """(`collobench artifacts build`, its command) for every command and group, depth first.
    Duck-typed: typer builds on its own copy of click, so click's classes do not match."""
    for name, command in sorted(getattr(group, "commands", {}).items()):
        path = f"{prefix} {name}"
        yield path, command
        yield from _commands(command, path)


def _cli_commands() -> dict[str, Any]:
    from stages.cli.app import app

    return dict(_commands(typer.main.get_command(app), "collobench"))


def _section(text: str, title: str) -> str | None:
    """The text under the first heading that contains `title` in backticks, up to the next
    heading of the same or a higher level."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        heading = _HEADING.match(line)
        if heading and f"`{title}`" in heading.group(2):
            level = len(heading.group(1))
            body = []
            for later in lines[index + 1 :]:
                other = _HEADING.match(later)
                if other and len(other.group(1)) <= level:
                    break
                body.append(later)
            return "\n".join(body)
    return None


def test_every_cli_command_has_a_section() -> None:
    commands = _cli_commands()
    assert {"collobench run", "collobench report"} <= set(commands), sorted(commands)
    text = _contracts()
    missing = sorted(path for path in commands if _section(text, path) is None)
    assert not missing, _report("CLI commands (a heading naming `collobench CMD`)", missing)


def test_every_cli_option_is_documented_under_its_command() -> None:
    text = _contracts()
    missing = []
    for path, command in _cli_commands().items():
        section = _section(text, path) or ""
        for parameter in command.params:
            if parameter.param_type_name != "option" or parameter.name == "help":
                continue
            for flag in [*parameter.opts, *parameter.secondary_opts]:
                if flag.startswith("--") and not re.search(rf"`{re.escape(flag)}\b", section):
                    missing.append(f"{path} {flag}")
    assert not missing, _report("CLI options (in their command's section)", missing)


# --------------------------------------------------------------------------- spec


def _models_in(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds: itself, list/dict items, union members
    (discriminated or not), Annotated's inner type."""
    origin = typing.get_origin(annotation)
    if origin is not None or isinstance(annotation, types.UnionType):
        found: list[type[BaseModel]] = []
        for argument in typing.get_args(annotation):
            found += _models_in(argument)
        return found
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


def _is_sequence(annotation: object) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (list, tuple, set, frozenset):
        return True
    if origin is typing.Annotated:
        return _is_sequence(typing.get_args(annotation)[0])
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        return any(_is_sequence(argument) for argument in typing.get_args(annotation))
    return False


def _spec_fields(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Dotted paths of every field as the YAML spells it, `[]` marking a list item:
    `pipelines[].loadgen.rate`.
    Members of a union share their path, so per-type models with the same field names add
    nothing new to document."""
    paths = set()
    for name, info in model.model_fields.items():
        path = f"{prefix}{info.alias or name}"  # the YAML key: an alias when the field has one
        paths.add(path)
        nested = path + ("[]." if _is_sequence(info.annotation) else ".")
        for member in _models_in(info.annotation):
            paths |= _spec_fields(member, nested)
    return paths


def test_every_spec_field_is_documented() -> None:
    from stages.spec.models import BenchmarkSpec

    paths = _spec_fields(BenchmarkSpec)
    assert {"name", "pipelines[].loadgen.rate", "pipelines[].stages[].id"} <= paths, paths
    missing = _missing(paths, _contracts())
    assert not missing, _report("spec fields (as `dotted.path`)", missing)


# --------------------------------------------------------------------------- run directory


def test_every_run_directory_table_and_column_is_documented() -> None:
    from stages.rundir.tables import SCHEMAS

    text = _contracts()
    missing = _missing([f"{table}.parquet" for table in SCHEMAS], text)
    for table, schema in SCHEMAS.items():
        section = _section(text, f"{table}.parquet") or ""
        missing += [f"{table}.{name}" for name in _missing(schema.names, section)]
    assert not missing, _report("run-directory files or columns (under `<table>.parquet`)", missing)


# --------------------------------------------------------------------------- links


def test_readme_links_the_design_and_the_contracts() -> None:
    links = set(_LINK.findall((REPO / "README.md").read_text()))
    targets = {link.split("#", 1)[0] for link in links}
    assert {"docs/design.md", "docs/contracts.md"} <= targets, sorted(targets)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {
        _slug(match.group(2))
        for line in path.read_text().splitlines()
        if (match := _HEADING.match(line))
    }


def test_links_between_the_documents_resolve() -> None:
    broken = []
    for source in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]:
        for link in _LINK.findall(source.read_text()):
            if re.match(r"[a-z]+:", link):
                continue  # a URL
            file_part, _, anchor = link.partition("#")
            target = (source.parent / file_part).resolve() if file_part else source
            if not target.exists():
                broken.append(f"{source.name}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                broken.append(f"{source.name}: {link} (no such heading)")
    assert not broken, "broken links: " + "; ".join(broken)


SERVER_COMMAND = re.compile(r"(dagster dev|dagster-webserver|mlflow (ui|server)|http\.server)")


def test_servers_the_docs_start_bind_loopback() -> None:
    """As the README's commands are checked (tests/reliability/test_security.py): a command
    line in a code block of docs/ that starts a server names 127.0.0.1."""
    for path in sorted(DOCS.glob("*.md")):
        in_code = False
        for line in path.read_text().splitlines():
            if line.startswith("```"):
                in_code = not in_code
            elif in_code and SERVER_COMMAND.search(line) and not line.lstrip().startswith("#"):
                assert re.search(r"(-h|--host)[ =]127\.0\.0\.1", line), (path.name, line)

"""The view manifest (analysis/warehouse/view_manifest.py) against the SQL it declares: the files
and their order, what each creates, which other files it reads (from the statements' parse trees,
DuckDB's json_serialize_sql), each summary's guard, and that the files a name needs are enough to
create it. Parsing SQL here is a check on the declaration; the loader never does."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import duckdb
import pytest

from analysis.warehouse import registered_files
from analysis.warehouse.sql_files import sql_text, view_files
from analysis.warehouse.view_manifest import (
    BY_FILE,
    VIEW_FILES,
    ViewFile,
    definition_of,
    files_defining,
    guards,
    summary_tables,
)

_CREATE = re.compile(
    r"CREATE\s+(?:OR\s+REPLACE\s+)?(VIEW|MACRO|TABLE\s+IF\s+NOT\s+EXISTS)\s+(\w+)"
    r"\s*(?:\([^)]*\))?\s+AS\s+(TABLE\s+)?(.*)$",
    re.DOTALL | re.IGNORECASE,
)
_GUARD_COMMENT = re.compile(r"^-- empty unless: (SELECT .+)$", re.MULTILINE)


def _creates(text: str) -> Iterator[tuple[str, str]]:
    """(name, SELECT that states what it reads) for each CREATE statement of a view file; a
    scalar macro's expression becomes `SELECT <expression>`."""
    for statement in duckdb.extract_statements(text):
        found = _CREATE.match(re.sub(r"--[^\n]*", "", statement.query).strip())
        if found is None:
            continue  # not a CREATE (85_tokens.sql drops an old view first)
        kind, name, as_table, body = found.groups()
        body = body.strip().rstrip(";")
        scalar_macro = kind.upper() == "MACRO" and not as_table
        yield name, f"SELECT {body}" if scalar_macro else body


def _referenced(node: Any, found: set[str], ctes: set[str]) -> None:
    """Collect the tables, views and functions a parse tree names (and its CTE names apart)."""
    if isinstance(node, dict):
        if node.get("type") == "BASE_TABLE":
            found.add(node["table_name"])
        if node.get("class") == "FUNCTION" and "function_name" in node:
            found.add(node["function_name"])
        for entry in node.get("cte_map", {}).get("map", []) if "cte_map" in node else []:
            ctes.add(entry["key"])
        for value in node.values():
            _referenced(value, found, ctes)
    elif isinstance(node, list):
        for value in node:
            _referenced(value, found, ctes)


@cache
def _parsed(file: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """What a view file's SQL creates, in order, and every name its statements reference."""
    connection = duckdb.connect(":memory:")
    created, found, ctes = [], set[str](), set[str]()
    try:
        for name, select in _creates(sql_text(f"views/{file}")):
            created.append(name)
            tree = json.loads(
                connection.execute("SELECT json_serialize_sql(?)", [select]).fetchall()[0][0]
            )
            assert not tree.get("error"), (file, name, tree.get("error_message"))
            _referenced(tree, found, ctes)
    finally:
        connection.close()
    return tuple(created), frozenset(found - ctes)


def test_the_manifest_lists_every_view_file_in_load_order() -> None:
    assert [entry.file for entry in VIEW_FILES] == view_files()
    assert len(BY_FILE) == len(VIEW_FILES)


@pytest.mark.parametrize("entry", VIEW_FILES, ids=lambda entry: entry.file)
def test_each_file_creates_what_it_declares(entry: ViewFile) -> None:
    created, _ = _parsed(entry.file)
    assert created and sorted(created) == sorted(entry.creates)


@pytest.mark.parametrize("entry", VIEW_FILES, ids=lambda entry: entry.file)
def test_each_file_reads_exactly_the_files_it_declares(entry: ViewFile) -> None:
    """The declared `reads` are the files that create a name this file's SQL references,
    each earlier in load order."""
    creator = {name: other.file for other in VIEW_FILES for name in _parsed(other.file)[0]}
    _, referenced = _parsed(entry.file)
    actual = {creator[name] for name in referenced if creator.get(name, entry.file) != entry.file}
    assert sorted(entry.reads) == sorted(actual)
    assert all(read < entry.file for read in entry.reads)


def test_guards_are_declared_where_the_sql_comments_say() -> None:
    """The files' `-- empty unless:` comments are documentation; they agree with the manifest."""
    commented = {}
    for entry in VIEW_FILES:
        comment = _GUARD_COMMENT.search(sql_text(f"views/{entry.file}"))
        if comment is not None:
            commented[entry.summary_table] = comment.group(1)
    assert commented == guards()
    assert set(guards()) == {
        "summary_accuracy",
        "summary_training",
        "summary_tokens",
        "summary_token_goodput",
    }


def test_each_summary_has_its_definition_and_view() -> None:
    for entry in VIEW_FILES:
        table = entry.summary_table
        if table is not None:
            view = table.removeprefix("summary_")
            assert {definition_of(table), view} <= set(entry.creates), entry.file
    assert len(summary_tables()) == 9


@pytest.mark.slow
def test_the_files_a_name_needs_are_enough_to_create_it() -> None:
    """For every file, its files_defining set alone (over empty raw tables) creates it: DuckDB
    binds a view when it is created, so a missing read fails here."""
    for entry in VIEW_FILES:
        connection = duckdb.connect(":memory:")
        try:
            connection.execute(sql_text("schema.sql"))
            registered_files.create_raw_views(connection)
            needed = files_defining(frozenset(entry.creates))
            assert needed[-1] == entry.file
            for file in needed:
                connection.execute(sql_text(f"views/{file}"))
            present = {
                str(row[0])
                for row in connection.execute(
                    "SELECT view_name FROM duckdb_views() UNION ALL SELECT table_name FROM "
                    "duckdb_tables() UNION ALL SELECT function_name FROM duckdb_functions()"
                ).fetchall()
            }
            assert set(entry.creates) <= present, entry.file
        finally:
            connection.close()

"""The run directory's Arrow schemas (stages.rundir.schemas.SCHEMAS) are the one statement of
each table's shape; what restates it is held to them here. The warehouse's raw-table shapes
(analysis.warehouse.registered_files.shapes, which the views over the run directories' Parquet files
take their columns and types from) are DuckDB's own reading of each Arrow type, column for column;
the column tables of docs/contracts.md name every column in schema order with its Arrow type; and
every table has its section there, in the tables' order. A column added, renamed, retyped or
reordered on one side only fails here. The warehouse's own tables (analysis/sql/schema.sql) are
listed apart."""

from __future__ import annotations

import re

import duckdb
import pyarrow as pa
import pytest

from analysis.warehouse import registered_files
from analysis.warehouse.sql_files import sql_text
from stages.rundir.schemas import SCHEMAS, TABLES
from tests.helpers import REPO

CONTRACTS = REPO / "docs" / "contracts.md"
_TABLE_HEADING = re.compile(r"^### `(\w+)\.parquet`$", re.MULTILINE)


def _tables(sql_file: str) -> set[str]:
    connection = duckdb.connect(":memory:")
    connection.execute(sql_text(sql_file))
    query = "SELECT table_name FROM duckdb_tables()"
    return {row[0] for row in connection.execute(query).fetchall()}


def _from_arrow(schema: pa.Schema) -> list[tuple[str, str]]:
    """The (column, type) list DuckDB itself makes of an Arrow schema (its own type mapping)."""
    connection = duckdb.connect(":memory:")
    empty = schema.empty_table()  # noqa: F841  (read by DuckDB's replacement scan)
    rows = connection.execute("DESCRIBE SELECT * FROM empty").fetchall()
    return [(str(name), str(kind)) for name, kind, *_ in rows]


def test_there_is_a_shape_for_each_run_directory_table_and_the_warehouse_stores_none() -> None:
    assert set(registered_files.shapes()) == set(TABLES)
    # the warehouse's own: runs and their files, versions, the capacity searches
    # (analysis.capacity.warehouse_tables) and the A/B sessions (analysis.ab); the raw rows
    # stay in the run directories
    assert _tables("schema.sql") == {
        "runs",
        "run_files",
        "schema_info",
        "capacity_searches",
        "capacity_probes",
        "capacity_region_rays",
        "ab_sessions",
        "ab_blocks",
    }


@pytest.mark.parametrize("table", TABLES)
def test_the_shape_of_each_table_matches_its_arrow_schema(table: str) -> None:
    assert list(registered_files.shapes()[table]) == _from_arrow(SCHEMAS[table])


def test_an_arrow_type_the_warehouse_cannot_type_is_named() -> None:
    with pytest.raises(TypeError, match=r"queries\.ratio: Arrow type halffloat"):
        registered_files.duckdb_type("queries", pa.field("ratio", pa.float16()))


def _column_table(section: str) -> list[tuple[str, pa.DataType]]:
    """The (column, Arrow type) rows of a section's `| column | type | meaning |` table; a row
    may name several columns with one type for all or one type each."""
    lines = section.splitlines()
    start = lines.index("| column | type | meaning |") + 2
    found = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        names_cell, types_cell = line.split(" | ")[:2]
        names = re.findall(r"`(\w+)`", names_cell)
        types = [pa.type_for_alias(kind.strip()) for kind in types_cell.split(",")]
        assert len(types) in (1, len(names)), line
        found += list(zip(names, types * len(names) if len(types) == 1 else types, strict=True))
    return found


def _sections() -> dict[str, str]:
    """Each `### `<table>.parquet`` section of docs/contracts.md, by table, in document order."""
    text = CONTRACTS.read_text()
    headings = list(_TABLE_HEADING.finditer(text))
    sections = {}
    for heading in headings:
        body = text[heading.end() :]
        end = re.search(r"^##", body, re.MULTILINE)
        sections[heading.group(1)] = body[: end.start() if end else None]
    return sections


def test_the_contracts_have_a_section_per_table_in_the_tables_order() -> None:
    assert tuple(_sections()) == TABLES


@pytest.mark.parametrize("table", TABLES)
def test_the_contracts_column_table_matches_the_schema(table: str) -> None:
    documented = _column_table(_sections()[table])
    assert documented == [(field.name, field.type) for field in SCHEMAS[table]]


WAREHOUSE_DOCUMENTED = ("ab_sessions", "ab_blocks")
"""The warehouse tables with a `#### `<table>`` column table in docs/contracts.md (DuckDB types)."""


def _warehouse_column_table(table: str) -> list[tuple[str, str]]:
    """The (column, DuckDB type) rows of the `#### `<table>`` section's column table."""
    text = CONTRACTS.read_text()
    body = text[text.index(f"#### `{table}`\n") :].split("\n#", 1)[0]
    lines = body.splitlines()
    start = lines.index("| column | type | meaning |") + 2
    found = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        names_cell, type_cell = line.split(" | ")[:2]
        found += [(name, type_cell.strip()) for name in re.findall(r"`(\w+)`", names_cell)]
    return found


@pytest.mark.parametrize("table", WAREHOUSE_DOCUMENTED)
def test_the_contracts_column_table_matches_the_warehouse_table(table: str) -> None:
    connection = duckdb.connect(":memory:")
    connection.execute(sql_text("schema.sql"))
    described = connection.execute(f"DESCRIBE {table}").fetchall()
    assert _warehouse_column_table(table) == [(str(row[0]), str(row[1])) for row in described]

"""The warehouse's shapes of the raw tables (analysis/sql/raw_tables.sql, which the views over
the run directories' Parquet files take their columns and types from) mirror the run
directory's Arrow schemas (stages.rundir.schemas.SCHEMAS) column for column: same tables, same
column names in the same order, the type DuckDB itself gives each Arrow type, and NOT NULL
exactly where Arrow says non-nullable. A column added, renamed, retyped or reordered on one
side only fails here. The warehouse's own tables (analysis/sql/schema.sql) are listed apart."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from analysis.sql_files import sql_text
from stages.rundir.layout import TABLES
from stages.rundir.schemas import SCHEMAS

Columns = list[tuple[str, str, bool]]  # (name, DuckDB type, nullable)


def _columns(connection: duckdb.DuckDBPyConnection, table: str) -> Columns:
    rows = connection.execute(
        "SELECT column_name, data_type, is_nullable FROM duckdb_columns() "
        "WHERE table_name = ? ORDER BY column_index",
        [table],
    ).fetchall()
    return [(str(name), str(kind), bool(nullable)) for name, kind, nullable in rows]


def _database(sql_file: str) -> duckdb.DuckDBPyConnection:
    """An in-memory database holding what `sql_file` creates."""
    connection = duckdb.connect(":memory:")
    connection.execute(sql_text(sql_file))
    return connection


@pytest.fixture(scope="module")
def shapes() -> duckdb.DuckDBPyConnection:
    return _database("raw_tables.sql")


def _tables(sql_file: str) -> set[str]:
    query = "SELECT table_name FROM duckdb_tables()"
    return {row[0] for row in _database(sql_file).execute(query).fetchall()}


def _from_arrow(schema: pa.Schema) -> Columns:
    """The columns DuckDB makes of an Arrow schema (its own type mapping), with Arrow's
    nullability."""
    connection = duckdb.connect(":memory:")
    empty = schema.empty_table()  # noqa: F841  (read by DuckDB's replacement scan)
    connection.execute("CREATE TABLE arrow AS SELECT * FROM empty")
    types = {name: kind for name, kind, _ in _columns(connection, "arrow")}
    return [(field.name, types[field.name], field.nullable) for field in schema]


def test_the_table_list_and_the_schemas_agree() -> None:
    assert tuple(SCHEMAS) == TABLES


def test_there_is_a_shape_for_each_run_directory_table_and_the_warehouse_stores_none() -> None:
    assert _tables("raw_tables.sql") == set(TABLES)
    # the warehouse's own: runs and their files, versions, and the capacity searches
    # (analysis.capacity.warehouse_tables); the raw rows stay in the run directories
    assert _tables("schema.sql") == {
        "runs",
        "run_files",
        "schema_info",
        "capacity_searches",
        "capacity_probes",
        "capacity_region_rays",
    }


@pytest.mark.parametrize("table", TABLES)
def test_the_shape_of_each_table_matches_its_arrow_schema(
    shapes: duckdb.DuckDBPyConnection, table: str
) -> None:
    assert _columns(shapes, table) == _from_arrow(SCHEMAS[table])

"""Results of an ad-hoc query as CSV, JSON or Parquet (what `collobench sql --format` writes).

The query runs on a read-only connection, as every reader's does. The formats:
- json: one array of objects (column -> value), nothing else. JSON has no infinities or NaN, and
  an infinite percentile means something here (a failed query counts as +inf), so +inf and -inf
  are written as the strings "inf" and "-inf" (as the manifest's summary writes them) and NaN as
  null, like SQL NULL. Timestamps and dates are ISO 8601 strings, decimals numbers, lists
  arrays, structs and maps objects; a JSON column (e.g. runs.manifest) stays a string.
- csv: a header line, then one line per row; NULL is an empty field, infinities and NaN are
  `inf`, `-inf`, `nan`, nested values their JSON text.
- parquet: the query's Arrow table, with DuckDB's column types.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from analysis.warehouse.reader import (
    check_read_only_statement,
    connect_read_only,
    require_read_only,
)

FORMATS = ("table", "csv", "json", "parquet")


def query_arrow(db_path: Path | str, sql: str) -> pa.Table:
    """Run `sql` (one SELECT, see db.check_read_only_statement) on a read-only connection to
    the warehouse; its result as an Arrow table."""
    check_read_only_statement(sql)
    connection = connect_read_only(db_path)
    try:
        # The check runs on a cursor of its own: its unfetched result would otherwise keep the
        # connection busy for connection.sql().
        probe = connection.cursor()
        try:
            require_read_only(probe)
        finally:
            probe.close()
        relation = connection.sql(sql)
        # A statement without a result set (SET, PRAGMA ...) gives no relation: no rows.
        return pa.table({}) if relation is None else relation.to_arrow_table()
    finally:
        connection.close()


def json_value(value: Any) -> Any:
    """One value made JSON-safe (see the module docstring for the rules)."""
    if isinstance(value, float):
        return _json_float(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, decimal.Decimal):
        return _json_float(float(value))
    if isinstance(value, (dict, list, tuple)):
        return _json_container(value)
    return _json_scalar(value)


def _json_float(value: float) -> float | str | None:
    """NaN as null, the infinities as "inf" and "-inf", any other float as it is."""
    if math.isnan(value):
        return None
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _json_scalar(value: Any) -> Any:
    """Times as ISO 8601 text, durations in seconds, bytes as hex, anything else as str()."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return str(value)  # a UUID among others


def _json_container(value: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> Any:
    """A dict or a MAP (Arrow gives a list of (key, value) tuples) as an object; a list or a
    tuple as an array."""
    if isinstance(value, dict):
        return {str(key): json_value(item) for key, item in value.items()}
    if (
        isinstance(value, list)
        and value
        and all(isinstance(item, tuple) and len(item) == 2 for item in value)
    ):
        return {str(key): json_value(item) for key, item in value}
    return [json_value(item) for item in value]


def table_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """The rows as tuples, column by column (to_pylist's dicts would merge duplicate names)."""
    return list(zip(*(column.to_pylist() for column in table.columns), strict=True))


def to_json(table: pa.Table) -> str:
    """The rows as one JSON array of objects (strict JSON: no NaN or Infinity tokens); of two
    columns with the same name, the later one's value stands (alias them to keep both)."""
    names = table.column_names
    rows = [
        {name: json_value(value) for name, value in zip(names, row, strict=True)}
        for row in table_rows(table)
    ]
    return json.dumps(rows, allow_nan=False, ensure_ascii=False)


def _csv_field(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(json_value(value), allow_nan=False, ensure_ascii=False)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    return value


def to_csv(table: pa.Table) -> str:
    """The rows as CSV text with a header line (see the module docstring for the rules)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.column_names)
    for row in table_rows(table):
        writer.writerow([_csv_field(value) for value in row])
    return buffer.getvalue()


def write_parquet(table: pa.Table, path: Path) -> None:
    """The result as a Parquet file at `path` (its folder is created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)

"""Terminal tables: a value with its 95% interval folded into one cell (`value [low, high]`),
a view's rows by the report catalogue's columns, and raw query results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.table import Table

from analysis.reports.report_entries import TERMINAL_NUMBERS  # pure Python: cheap at CLI start


def cell(value: Any) -> str:
    """A value as a terminal cell ("-" for None and NaN; TERMINAL_NUMBERS for a float)."""
    return TERMINAL_NUMBERS(value)


def fmt(value: float | None, pattern: str = "{:.1f}") -> str:
    """`value` by `pattern`, "-" when None."""
    return "-" if value is None else pattern.format(value)


def ci_names(name: str) -> tuple[str, str]:
    """The names of a figure's interval bounds, as the views and summaries spell them:
    `x_ci_low` / `x_ci_high`, with a `_ms` unit kept last (`x_ms` -> `x_ci_low_ms`)."""
    stem, unit = (name[:-3], "_ms") if name.endswith("_ms") else (name, "")
    return f"{stem}_ci_low{unit}", f"{stem}_ci_high{unit}"


def with_interval(value: Any, low: Any, high: Any, fmt: Callable[[Any], str] = cell) -> str:
    """`value [low, high]`, or the value alone when a bound is missing (None or NaN)."""
    if low is None or high is None or cell(low) == "-" or cell(high) == "-":
        return fmt(value)
    return f"{fmt(value)} [{fmt(low)}, {fmt(high)}]"


def interval_columns(columns: Sequence[str]) -> list[tuple[str, str | None, str | None]]:
    """(column, its ci_low column, its ci_high column) for each column shown, the interval
    columns folded into the value's (`x_ci_low` / `x_ci_low_ms` beside `x` / `x_ms`)."""
    shown = set(columns)
    folded: list[tuple[str, str | None, str | None]] = []
    for column in columns:
        if "_ci_low" in column or "_ci_high" in column:
            continue
        low, high = ci_names(column)
        if low in shown and high in shown:
            folded.append((column, low, high))
        else:
            folded.append((column, None, None))
    return folded


def compact_table(title: str | None, frame: Any, columns: Sequence[str]) -> Table:
    """A view's rows with each figure and its interval in one cell: `value [low, high]`.
    LookupError naming the table and the column when a column is not in the rows."""
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise LookupError(f"table {title!r}: no column {', '.join(map(repr, missing))}")
    table = Table(title=title, title_justify="left")
    folded = interval_columns(columns)
    for column, _, _ in folded:
        table.add_column(column)
    for row in frame.to_dict("records"):
        table.add_row(
            *(
                with_interval(row[column], low and row[low], high and row[high])
                for column, low, high in folded
            )
        )
    return table


def frame_table(title: str | None, columns: Sequence[Any], rows: Any) -> Table:
    """Rows of a query as a table, every value by `cell`."""
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(str(column))
    for row in rows:
        table.add_row(*(cell(value) for value in row))
    return table

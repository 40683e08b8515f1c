"""The warehouse's leaf: its SQL files, the one error every part of it raises, and SQL quoting.

Everything else in analysis's warehouse imports this module and nothing here imports them:
readers -> migrations -> registered_files -> db -> sql_files.
"""

from __future__ import annotations

from importlib import resources

from stages.contracts.errors import WarehouseUnavailableError


class WarehouseError(WarehouseUnavailableError, RuntimeError):
    """The warehouse cannot be used as asked; the message is one line: `<db>: <reason>`."""


def sql_text(name: str) -> str:
    """The text of `analysis/sql/<name>` (a path relative to the sql folder), read through
    importlib.resources so it works from an installed wheel as well as from a checkout."""
    return resources.files("analysis").joinpath("sql", name).read_text(encoding="utf-8")


def view_files() -> list[str]:
    """Names of the view files, in load order: sorted by name, so the numeric prefixes put a
    view after the views it reads (throughput and latency before contention)."""
    folder = resources.files("analysis").joinpath("sql", "views")
    return sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".sql"))


def sql_literal(text: str) -> str:
    """`text` as an SQL string literal (quotes doubled): for the paths a DuckDB view or COPY
    names, which cannot be bound as parameters."""
    return "'" + text.replace("'", "''") + "'"

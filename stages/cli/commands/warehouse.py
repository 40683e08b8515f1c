"""`collobench load`, `sql` and `compare`: put run directories into the DuckDB warehouse and
read it back (read-only) as tables, CSV, JSON, Parquet or a comparison of two runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from stages import settings
from stages.cli.console import err, fail_input, out
from stages.cli.options import DbOption
from stages.cli.render import compact_table, frame_table


def load(
    run_dirs: Annotated[
        list[Path] | None,
        typer.Argument(help="Run directories, or A/B session folders.", show_default=False),
    ] = None,
    db: DbOption = None,
    forget: Annotated[
        list[str] | None,
        typer.Option(
            "--forget",
            help="Remove this run (a run_id) from the warehouse instead; its directory stays. "
            "Repeatable.",
        ),
    ] = None,
    forget_missing: Annotated[
        bool,
        typer.Option(
            "--forget-missing",
            help="Remove every run whose files are gone (its directory was moved or deleted).",
        ),
    ] = False,
) -> None:
    """Load run directories (and A/B session folders) into DuckDB; loading a run again
    replaces it (idempotent). The rows stay in the run directories' Parquet files, which the
    warehouse registers."""
    from analysis.warehouse.loader import forget_runs

    db_path = db or settings.duckdb_path()
    forgetting = bool(forget) or forget_missing
    if forgetting and run_dirs:
        raise fail_input(["--forget: give run ids to forget or run directories to load, not both"])
    if not forgetting and not run_dirs:
        raise fail_input(["load: give run directories (or --forget RUN_ID / --forget-missing)"])
    # A LoadError or WarehouseError (held past COLLOBENCH_WAREHOUSE_WAIT_S, a newer schema)
    # ends the command with exit 2 through stages.cli.errors.
    if forgetting:
        for run_id in forget_runs(list(forget or []), db_path, forget_missing):
            out.print(f"forgot {run_id}", highlight=False)
    else:
        _load_folders(list(run_dirs or []), db_path)
    out.print(f"database: {db_path}", highlight=False)


def _load_folders(folders: list[Path], db_path: Path) -> None:
    """Load the run directories, then the A/B session folders (a folder holding session.json,
    loaded with its segment runs: analysis.ab.warehouse_tables), printing one line each."""
    from analysis.ab.session_rows import is_session_folder
    from analysis.warehouse.loader import load_runs

    sessions = [folder for folder in folders if is_session_folder(folder)]
    run_dirs = [folder for folder in folders if not is_session_folder(folder)]
    if run_dirs:
        for loaded in load_runs(run_dirs, db_path):
            verb = "replaced" if loaded.replaced else "loaded"
            counts = ", ".join(f"{rows} {table}" for table, rows in loaded.rows.items() if rows)
            out.print(f"{verb} {loaded.run_id} ({loaded.status}): {counts}", highlight=False)
    if sessions:
        from analysis.ab.warehouse_tables import load_ab_dirs

        for session_id in load_ab_dirs(sessions, db_path):
            out.print(f"loaded A/B session {session_id}", highlight=False)


def _check_output(output_format: str, out_file: Path | None) -> None:
    """Refuse a --format / --out pair that cannot work (exit 2), before the warehouse opens."""
    from analysis.warehouse.export import FORMATS

    if output_format not in FORMATS:
        raise fail_input([f"--format: {output_format!r} is not one of {', '.join(FORMATS)}"])
    if output_format == "parquet" and out_file is None:
        raise fail_input(["--format: parquet is a binary file; name it with --out FILE"])
    if output_format == "table" and out_file is not None:
        raise fail_input(["--out: the table format is for the terminal; use csv, json or parquet"])


def _query(db_path: Path, query: str) -> Any:
    """The query's result as an Arrow table; exit 2 with one line when it cannot run."""
    import duckdb

    from analysis.warehouse.export import query_arrow
    from analysis.warehouse.reader import ReadOnlyRequired

    try:
        return query_arrow(db_path, query)
    except FileNotFoundError as error:
        raise fail_input([str(error).strip("'\"")]) from None
    except ReadOnlyRequired as error:  # not one SELECT: refused before the warehouse opened
        raise fail_input([f"sql: {error}"]) from None
    except duckdb.Error as error:
        lines = str(error).splitlines() or [type(error).__name__]
        raise fail_input([f"sql: {lines[0]}"]) from None


def _write_output(table: Any, output_format: str, out_file: Path | None) -> None:
    """csv or json to stdout (nothing else goes there) or to `out_file`; parquet to
    `out_file`. Exit 2 for an unwritable --out."""
    from analysis.warehouse.export import to_csv, to_json, write_parquet

    try:
        if output_format == "parquet":
            assert out_file is not None
            write_parquet(table, out_file)
        else:
            text = to_json(table) + "\n" if output_format == "json" else to_csv(table)
            if out_file is None:
                sys.stdout.write(text)  # nothing else goes to stdout: pipe it into jq or a file
                return
            out_file.parent.mkdir(parents=True, exist_ok=True)
            out_file.write_text(text, encoding="utf-8")
    except (OSError, ValueError) as error:  # an unwritable --out, a NUL byte in it
        raise fail_input([f"--out: {getattr(error, 'strerror', None) or error}"]) from None
    err.print(
        f"wrote {table.num_rows} rows to {out_file}", markup=False, highlight=False, soft_wrap=True
    )


def sql(
    query: Annotated[str, typer.Argument(help="SQL to run read-only.", show_default=False)],
    db: DbOption = None,
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="table (the terminal), csv, json (one array of objects) or parquet (needs --out).",
        ),
    ] = "table",
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Write csv, json or parquet to this file.")
    ] = None,
) -> None:
    """Run one SQL query on the results database, over a read-only connection; print it as a
    table, CSV or JSON, or write it to a file (csv, json, parquet)."""
    from analysis.warehouse.export import table_rows

    _check_output(output_format, out_file)
    table = _query(db or settings.duckdb_path(), query)
    if output_format == "table":
        out.print(frame_table(None, table.column_names, table_rows(table)))
        return
    _write_output(table, output_format, out_file)


def compare(
    run_a: Annotated[str, typer.Argument(help="Baseline run id (A).", show_default=False)],
    run_b: Annotated[str, typer.Argument(help="Run id compared with it (B).", show_default=False)],
    db: DbOption = None,
    allow_different_specs: Annotated[
        bool,
        typer.Option("--allow-different-specs", help="Compare runs whose spec hashes differ."),
    ] = False,
) -> None:
    """Compare run B with run A per pipeline and phase: throughput and p50/p99 latency as
    ratios B / A with 95% intervals, and a verdict (faster, slower, no measurable change). The
    intervals are within-run; `collobench history` judges a run against the runs before it."""
    from analysis.history.compare import (
        COMPARISON_TERMINAL,
        COMPARISON_TITLE,
        SpecMismatch,
        UnknownRun,
        compare_runs,
    )

    db_path = db or settings.duckdb_path()
    try:
        frame = compare_runs(db_path, run_a, run_b, allow_different_specs)
    except FileNotFoundError as error:
        raise fail_input([str(error).strip("'\"")]) from None
    except UnknownRun as error:
        raise fail_input([f"{db_path}: {str(error).strip(chr(39) + chr(34))}"]) from None
    except SpecMismatch as error:
        raise fail_input([f"{run_b}: {error}"]) from None
    frame = frame.astype({"trial": object})
    frame.loc[frame["trial"].isna(), "trial"] = "all"
    title = COMPARISON_TITLE.format(
        run_a=run_a, run_b=run_b, host_a=_host(frame, "a_host"), host_b=_host(frame, "b_host")
    )
    out.print(compact_table(title, frame, COMPARISON_TERMINAL))
    out.print(WITHIN_RUN_NOTE.format(spec=_spec_name(db_path, run_b)), highlight=False)


WITHIN_RUN_NOTE = (
    "These intervals are within-run only (batch means over each run's own queries): they do "
    "not count how much whole runs differ on this machine, so two runs of unchanged code can "
    "read 'faster' or 'slower'. For a verdict against the runs before B (between-run spread, "
    "change points, likely cause): collobench history {spec}"
)


def _spec_name(db_path: Path, run_id: str) -> str:
    """A loaded run's spec hash (12 characters; else its name), for `collobench history`."""
    from analysis.warehouse.reader import connect_read_only

    connection = connect_read_only(db_path)
    try:
        row = connection.execute(
            "SELECT coalesce(left(spec_hash, 12), name) FROM runs WHERE run_id = ?", [run_id]
        ).fetchone()
    finally:
        connection.close()
    return str(row[0]) if row and row[0] else "SPEC"


def _host(frame: Any, column: str) -> str:
    """The host id of a compared run (the same on every row), `unknown` when not recorded."""
    value = frame[column].iloc[0] if len(frame) else None
    return value if isinstance(value, str) else "unknown"

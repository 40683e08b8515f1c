"""`collobench history SPEC`: every run of a benchmark judged against the runs before it (the
between-run band, change points, the minimal detectable change and each change's likely cause),
as a table or JSON, with a PNG of the series."""

from __future__ import annotations

import json
import math
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from stages import settings
from stages.cli.console import fail_input, out
from stages.cli.options import DbOption, OverridesOption
from stages.cli.render import cell, with_interval


class HistoryFormat(StrEnum):
    table = "table"
    json = "json"


def history(
    spec: Annotated[
        str,
        typer.Argument(
            help="The benchmark: a spec file (its hash, with any --set), a spec name or a spec "
            "hash (8 characters or more).",
            show_default=False,
        ),
    ],
    db: DbOption = None,
    overrides: OverridesOption = None,
    pipeline: Annotated[
        str | None, typer.Option("--pipeline", help="Only this pipeline's series.")
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option(
            "--metric", help="Only this metric: queries_per_s, latency_p50_ms, latency_p99_ms."
        ),
    ] = None,
    output_format: Annotated[
        HistoryFormat, typer.Option("--format", help="table, or json (one object per row).")
    ] = HistoryFormat.table,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Where to write the PNG (default: history/ beside the DB)."),
    ] = None,
) -> None:
    """A benchmark's runs in time order, each metric judged against the runs before it on the
    same machine class: regressed, improved, no change or undecided (with the runs it needs),
    the change and its interval, the likely cause (code, environment, machine) and the smallest
    change the history can see. Writes a PNG of the series with the change points marked."""
    from analysis.history.history_plot import plot_history
    from analysis.history.verdicts import UnknownSpec, history_connection, resolve_spec_hash
    from analysis.warehouse.reader import connect_read_only

    db_path = db or settings.duckdb_path()
    reference = _spec_reference(spec, list(overrides or []))
    try:
        connection = connect_read_only(db_path)
    except FileNotFoundError as error:
        raise fail_input([str(error).strip("'\"")]) from None
    try:
        spec_hash = resolve_spec_hash(connection, reference)
        frame = history_connection(connection, spec_hash, pipeline, metric)
    except UnknownSpec as error:
        raise fail_input([f"{db_path}: {error}"]) from None
    finally:
        connection.close()
    if frame.empty:
        what = " ".join(f"--{k} {v}" for k, v in (("pipeline", pipeline), ("metric", metric)) if v)
        raise fail_input([f"{spec}: no figures for {what or 'this spec'} in {db_path}"])
    name = Path(spec).stem if Path(spec).is_file() else spec
    png = plot or Path(db_path).parent / "history" / f"{name}-{spec_hash[:12]}.png"
    plot_history(frame, png, f"{name} ({spec_hash[:12]}): history")
    if output_format is HistoryFormat.json:
        _print_json(frame)
    else:
        _print_table(frame, f"{name} ({spec_hash[:12]}) on {db_path}", png)


def _print_json(frame: Any) -> None:
    """One array of objects, the contract's keys (JSON_KEYS) first in every object."""
    from analysis.history.verdicts import JSON_KEYS

    keys = [*JSON_KEYS, *(c for c in frame.columns if c not in JSON_KEYS)]
    rows = [{key: _json_value(row[key]) for key in keys} for row in frame.to_dict("records")]
    out.print_json(json.dumps(rows))


def _print_table(frame: Any, title: str, png: Path) -> None:
    out.print(_table(frame, title))
    classes = frame["machine_class"].nunique()
    if classes > 1:
        out.print(f"{classes} machine classes: each is its own history, never pooled.")
    out.print(f"plot: {png}", highlight=False)


def _spec_reference(spec: str, overrides: list[str]) -> str:
    """The spec hash of a spec file (with its --set overrides), else `spec` as given (a name or
    a hash); a spec file that does not load is an input error naming it."""
    if not Path(spec).is_file():
        if overrides:
            raise fail_input([f"{spec}: --set needs a spec file"])
        return spec
    from stages.validation.loading import load_spec

    return load_spec(spec, overrides).spec_hash  # a SpecError is an input error (exit 2)


TABLE_COLUMNS = (
    "run", "run_id", "series", "value", "verdict", "change %", "mde %", "cause",
)  # fmt: skip


def _table(frame: Any, title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in TABLE_COLUMNS:
        table.add_column(column)
    for row in frame.to_dict("records"):
        change = row["change_ci95"]
        table.add_row(
            f"{'| ' if row['change_point'] else ''}{row['run_seq']}",
            str(row["run_id"]),
            f"t{row['trial']} {row['phase']} {row['pipeline']} {row['metric']}",
            with_interval(row["value"], row["ci95_low"], row["ci95_high"]),
            str(row["verdict"]),
            with_interval(row["change_pct"], *(change or (None, None))),
            cell(row["mde_pct"]),
            row["cause"] if isinstance(row["cause"], str) else "",
        )
    table.caption = "'| ' marks a change point (the first run of a new regime)"
    return table


def _json_value(value: Any) -> Any:
    """A row's value as JSON: NaN and infinities as null, timestamps as ISO text, numpy scalars
    as Python numbers."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value

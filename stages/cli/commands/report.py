"""`collobench report`: a run's report tables in the terminal, by the report catalogue
(analysis.reports.catalogue), with report.md, its plots and trace.json written beside them; and
the tables shown after `collobench run`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from stages import settings
from stages.cli.console import err, fail_input, out
from stages.cli.options import DbOption
from stages.cli.render import compact_table


def report(
    run_id: Annotated[str | None, typer.Argument(help="Run id (default: latest).")] = None,
    db: DbOption = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Folder for report.md, its plots and trace.json (default: the run directory).",
        ),
    ] = None,
) -> None:
    """Print throughput, latency, stage breakdown, energy and contention for a run; write
    report.md with PNG plots and a Perfetto trace (trace.json) beside it."""
    from analysis.reports.catalogue import entry
    from analysis.reports.report import latest_run_id
    from analysis.reports.report import report as build_report

    db_path = db or settings.duckdb_path()
    try:
        chosen = run_id if run_id is not None else latest_run_id(db_path)
        tables = build_report(db_path, chosen)
    except (LookupError, FileNotFoundError) as error:  # ReportCatalogueError is a LookupError too
        raise fail_input([str(error).strip("'\"")]) from None
    for name, frame in shown_tables(tables).items():
        if name == "goodput" and frame["slo_ms"].isna().all():
            continue  # no pipeline sets slo_ms: nothing defines a good query
        out.print(compact_table(name, frame, entry(name).terminal))
    out.print('every column of every view: collobench sql "SELECT * FROM <view>"', highlight=False)
    try:
        write_report_files(db_path, chosen, out_dir)
    except OSError as error:
        raise fail_input([f"{out_dir or chosen}: {error.strerror or error}"]) from None


def shown_tables(tables: dict[str, Any]) -> dict[str, Any]:
    """The report tables worth a terminal table, in order: empty ones dropped; `contention`
    (and `contention_by_run`) cut to the full collocated phase, one row per pipeline, since
    `interference` lists every co-runner set and is shown only when the run has subset phases
    (`collocation.subsets`); `energy_split` only when some window's energy was measured."""
    shown: dict[str, Any] = {}
    for name, frame in tables.items():
        if name in ("contention", "contention_by_run"):
            frame = frame[frame["phase"] == "collocated"]
        if name == "interference" and not frame["phase"].str.startswith("collocated:").any():
            continue
        if name == "energy_split" and frame["total_energy_j"].isna().all():
            continue
        if not frame.empty:
            shown[name] = frame
    return shown


def _worth_showing_after_run(name: str, frame: Any) -> bool:
    if name == "contention_by_run" and int(frame["trials"].max()) < 2:
        return False  # one trial: the per-trial table says it all
    if name == "token_goodput" and frame["ci_method"].isna().all():
        return False  # no token SLO set: nothing defines a good query
    # nothing measured energy (no NVML, RAPL or power model): no table
    return not (name == "perf_per_watt" and frame["energy_source"].isna().all())


def load_and_show_results(run_dir: Path, run_id: str, db_path: Path) -> bool:
    """Load a finished run into DuckDB (as the Dagster warehouse asset does) and show what the
    summary does not (the catalogue's AFTER_RUN views): accuracy, training loss, tokens
    (TTFT/TPOT/ITL), token goodput, performance per watt, the energy split, contention and
    interference, each when the run has it; a failure here is a warning, the run is on disk.
    True when it loaded."""
    from analysis.reports.catalogue import AFTER_RUN, entry
    from analysis.reports.report import report as build_report
    from analysis.warehouse.loader import load_runs

    try:
        load_runs([run_dir], db_path)
        tables = build_report(db_path, run_id)
    except Exception as error:
        err.print(f"warning: could not load the run into {db_path}: {error}", markup=False)
        return False
    shown = shown_tables(tables)
    for name in AFTER_RUN:
        frame = shown.get(name)
        if frame is not None and _worth_showing_after_run(name, frame):
            view = entry(name)
            out.print(compact_table(view.after_run_title, frame, view.terminal))
    out.print(f"loaded into {db_path}; full report: collobench report {run_id}", highlight=False)
    return True


def write_report_files(db_path: Path, run_id: str, out_dir: Path | None) -> None:
    """Write report.md with its plots and trace.json (analysis.reports.report_file,
    analysis.reports.trace) and print where they went."""
    from analysis.reports.report_file import write_report
    from analysis.reports.trace import write_trace

    files = write_report(db_path, run_id, out_dir)
    trace = write_trace(db_path, run_id, out_dir)
    out.print(f"report: {files.report_md}", highlight=False, soft_wrap=True)
    for path in files.plots.values():
        out.print(f"plot: {path}", highlight=False, soft_wrap=True)
    capped = f"; {trace.capped_tracks} track(s) capped" if trace.capped_tracks else ""
    out.print(
        f"trace: {trace.path} ({trace.slices} slices, {trace.counters} counter samples{capped}; "
        "open in https://ui.perfetto.dev)",
        highlight=False,
        soft_wrap=True,
    )

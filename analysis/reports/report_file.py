"""`report.md` of one run: its headline figures with intervals and its PNG plots, on disk.

`write_report()` writes report.md and the plots (analysis.reports.plots) into the run's directory
(the one the warehouse recorded when the run was loaded) or into `out_dir`, and returns the paths.
The markdown carries the headline figures only (throughput, latency percentiles, contention, each
with its interval and method); every other table stays in the terminal (`collobench report`) and in
the views (`collobench sql`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.reports import contention_plot, plots
from analysis.reports.catalogue import CATALOGUE, PLOTS
from analysis.reports.report import latest_run_id, report
from analysis.reports.report_entries import MARKDOWN_NUMBERS
from analysis.warehouse.reader import connect_read_only

REPORT_NAME = "report.md"


@dataclass(frozen=True)
class ReportFiles:
    """What write_report wrote: the markdown and each plot that had data."""

    report_md: Path
    plots: dict[str, Path] = field(default_factory=dict)


def _with_interval(row: Any, value: str, low: str, high: str) -> str:
    text = MARKDOWN_NUMBERS(row[value])
    if low in row and high in row and not pd.isna(row[low]) and not pd.isna(row[high]):
        text += f" [{MARKDOWN_NUMBERS(row[low])}, {MARKDOWN_NUMBERS(row[high])}]"
    return text


def markdown_table(frame: pd.DataFrame, columns: Sequence[tuple[str, str]]) -> str:
    """A GitHub markdown table of `frame`: columns are (header, cell spec), where a spec
    `x|low|high` shows x with its interval [low, high] and a plain name shows the value."""
    lines = [
        "| " + " | ".join(header for header, _ in columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for _, row in frame.iterrows():
        cells = []
        for _, spec in columns:
            parts = spec.split("|")
            cells.append(
                _with_interval(row, *parts) if len(parts) == 3 else MARKDOWN_NUMBERS(row[spec])
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_directory(db_path: Path | str, run_id: str) -> Path:
    """Where the run directory was when the run was loaded (the runs table's run_id row)."""
    connection = connect_read_only(db_path)
    try:
        row = connection.execute("SELECT run_dir FROM runs WHERE run_id = ?", [run_id]).fetchone()
    finally:
        connection.close()
    if row is None:
        raise LookupError(f"{db_path}: no run {run_id!r} loaded")
    return Path(str(row[0]))


def _header(db_path: Path | str, run_id: str) -> list[str]:
    connection = connect_read_only(db_path)
    try:
        row = connection.execute(
            "SELECT name, spec_hash, status, started_at, ended_at FROM runs WHERE run_id = ?",
            [run_id],
        ).fetchone()
    finally:
        connection.close()
    name, spec_hash, status, started, ended = row if row else (None,) * 5
    return [
        f"# {name or run_id}: benchmark report",
        "",
        f"- run id: `{run_id}`",
        f"- status: {status}; started {started}, ended {ended or '(cut short)'}",
        f"- spec hash: `{(spec_hash or '')[:16]}`",
        "- figures: measured queries only (warm-up excluded); latency from the scheduled "
        "arrival; percentiles are LoadGen's; [95% interval] with the method named per table",
        "",
    ]


# How each plot of the catalogue (analysis.reports.catalogue.PLOTS) is drawn.
_DRAW: dict[str, Callable[[Any, str, Path], Path | None]] = {
    "latency_cdf": plots.plot_latency_cdf,
    "timeline": plots.plot_timeline,
    "stage_breakdown": plots.plot_stage_breakdown,
    "contention": contention_plot.plot_contention,
}


def write_report(
    db_path: Path | str, run_id: str | None = None, out_dir: Path | None = None
) -> ReportFiles:
    """Write report.md and its PNG plots for `run_id` (the latest run when None) into
    `out_dir`, by default the run's directory; returns their paths. LookupError for an unknown
    run, FileNotFoundError without a warehouse."""
    chosen = run_id if run_id is not None else latest_run_id(db_path)
    frames = report(db_path, chosen)  # raises LookupError for an unknown run
    target = Path(out_dir) if out_dir is not None else run_directory(db_path, chosen)
    target.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    connection = connect_read_only(db_path)
    try:
        for plot in PLOTS:
            path = _DRAW[plot.key](connection, chosen, target / plot.file_name)
            if path is not None:
                written[plot.key] = path
    finally:
        connection.close()
    lines = _header(db_path, chosen)
    for view in CATALOGUE:
        frame = frames[view.view]
        section = view.report_md
        if section is not None and section.rows_with is not None:
            frame = frame[frame[section.rows_with].notna()]
        if section is None or frame.empty:
            continue
        lines += [f"## {section.title}", "", markdown_table(frame, section.columns), ""]
    for plot in PLOTS:
        if plot.key in written:
            lines += [f"## {plot.title}", "", f"![{plot.title}]({plot.file_name})", ""]
    lines += [
        'Every view, every column: `collobench sql "SELECT * FROM <view> WHERE run_id = '
        f"'{chosen}'\"`; the trace (if written) opens in https://ui.perfetto.dev.",
        "",
    ]
    report_md = target / "report.md"
    report_md.write_text("\n".join(lines), encoding="utf-8")
    return ReportFiles(report_md=report_md, plots=written)

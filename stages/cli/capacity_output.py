"""What `collobench capacity` hands the search (the verdict latencies, from the analysis
layer) and what it does with the result: the warehouse, the report with its plot,
MLflow, and the answer on the terminal. The analysis imports are lazy, as in stages.cli.wiring;
a report or warehouse failure is a warning (the search is on disk)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rich.table import Table

from stages.cli.console import err, out


def verdict_latencies(run_dir: Path) -> dict[str, list[float]]:
    """Per pipeline, every measured query's verdict latency in scheduled order."""
    from analysis.reports.headline_figures import verdict_latencies as latencies_of

    return latencies_of(run_dir)


def log_search(search_dir: Path, tracking_uri: str) -> str | None:
    """The search in MLflow (a parent run, a child per probe); a warning when it fails."""
    try:
        from stages.cli.mlflow_capacity import log_search as log_to_mlflow

        return log_to_mlflow(search_dir, tracking_uri)
    except Exception as error:  # the search is on disk whatever MLflow says
        err.print(f"warning: could not record the search in MLflow: {error}", markup=False)
        return None


def publish_search(search_dir: Path, db_path: Path) -> Path | None:
    """Load the search (and its probes' runs) into the warehouse and write its report (the
    p99-vs-rate plot beside it); the report's path, None when it could not be written."""
    try:
        from analysis.warehouse.db import connect_writer, writer_lock

        with writer_lock(db_path):
            from analysis.capacity.warehouse_tables import load_search

            connection = connect_writer(db_path)
            try:
                load_search(connection, search_dir)
            finally:
                connection.close()
        out.print(f"loaded into {db_path} (view `capacity`)", highlight=False)
    except Exception as error:
        err.print(f"warning: could not load the search into {db_path}: {error}", markup=False)
    try:
        from analysis.capacity.report_markdown import write_search_report

        return Path(write_search_report(search_dir))
    except Exception as error:
        err.print(f"warning: could not write the search's report: {error}", markup=False)
        return None


def print_result(result: Any, search_dir: Path, report: Path | None) -> None:
    """The answer: the guaranteed (certified) capacity and the estimate with its interval, each
    saying what it is, then the bracket, why it stopped, every probe, and where the files are."""
    out.print(probe_table(result.probes))
    lines = [
        f"pipeline {result.pipeline}, p{_percent(result.percentile)} <= {result.slo_ms:g} ms"
        + (f", next to {_with(result.with_rates)}" if result.with_rates else ", alone"),
        *headline(result),
        f"stop reason: {result.stop_reason}",
        f"capacity.json: {search_dir / 'capacity.json'}",
        f"report: {report}" if report is not None else "report: - (see the warning above)",
    ]
    if report is not None:
        from analysis.capacity.report_markdown import SEARCH_PLOT

        plot = report.with_name(SEARCH_PLOT)
        lines.append(f"plot: {plot}" if plot.exists() else "plot: - (none was drawn)")
    after_stop = 2 + len(headline(result))  # the line after `stop reason`
    if result.stop_detail:
        lines.insert(after_stop, f"{result.stop_reason}: {result.stop_detail}")
    if result.spent_s is not None:
        lines.insert(
            after_stop + 1 if result.stop_detail else after_stop,
            f"spent: {len(result.probes)} probes, {result.spent_s / 60:.1f} min",
        )
    for line in lines:
        out.print(line, highlight=False, markup=False)


def headline(result: Any) -> list[str]:
    """Which figure is the guarantee and which the estimate, in so many words: size hardware by
    the first for an SLO that must hold, read the second for where the capacity lies."""
    estimate = _qps(result.estimate_qps)
    if result.estimate_ci95 is not None:
        low, high = result.estimate_ci95
        estimate += f" [{low:.2f}, {high:.2f}] (95%)"
    lo, hi = result.bracket
    return [
        f"guaranteed (99%): {_qps(result.certified_qps)}; estimate: {estimate}",
        "  guaranteed = certified_qps: the SLO held at this rate at 99% confidence; size "
        "hardware by it",
        "  estimate = estimate_qps: where the capacity most likely lies; not a guarantee",
        f"bracket: [{_qps(lo)}, {_qps(hi)}]",
    ]


def probe_table(probes: list[Any]) -> Table:
    table = Table(title="probes")
    for column in ("#", "kind", "rate q/s", "seed", "verdict", "p99 ms", "over/queries", "note"):
        table.add_column(column)
    for probe in probes:
        verdict = (probe.verdict or "-") + (" (flagged)" if probe.flagged else "")
        rate = f"{probe.rate:.2f}" if probe.kind == "search" else "-"
        if probe.kind == "ceiling" and probe.throughput_qps is not None:
            verdict = f"{probe.throughput_qps:.1f} q/s"
        table.add_row(
            str(probe.index),
            probe.kind,
            rate,
            str(probe.seed),
            verdict,
            "-" if probe.p99_ms is None else f"{probe.p99_ms:.1f}",
            f"{probe.over_slo}/{probe.queries}",
            probe.abort_reason or "",
        )
    return table


def _qps(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf" if math.isinf(value) else f"{value:.2f} q/s"


def _percent(percentile: float) -> str:
    return f"{percentile * 100:g}"


def _with(rates: dict[str, float]) -> str:
    return ", ".join(f"{name} at {rate:g} q/s" for name, rate in rates.items())

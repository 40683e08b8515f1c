"""The headline table printed when a run ends: per pipeline and phase, from the warehouse's
views over the run directory (analysis.reports.headline_figures), the figures the manifest and
MLflow hold."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from stages.cli.render import fmt, with_interval

COLUMNS = (
    "trial",
    "phase",
    "pipeline",
    "status",
    "ok",
    "failed",
    "q/s",
    "verdict",
    "completed p99",
    "bound",
    "SLO",
    "issue µs p50/p99",
)


def _one_decimal(value: Any) -> str:
    return fmt(value, "{:.1f}")


def _two_decimals(value: Any) -> str:
    return fmt(value, "{:.2f}")


def _slo(row: Any) -> str:
    """met (LoadGen's early-stopping rule), missed (its mirror binomial test: too many queries
    over the SLO to meet the percentile) or undecided (too few queries to tell either way), as
    analysis.reports.early_stopping decides; "-" without an SLO."""
    return str(row.slo_verdict) if row.slo_verdict is not None else "-"


def _schedule_kept(row: Any) -> str:
    """Issue delay p50/p99 in microseconds and, in brackets, the share of queries issued more
    than 100 us late: how well the run kept its own schedule."""
    if row.issue_delay_p99_us is None:
        return "-"
    share = row.issue_delay_over_100us_share
    late = "" if share is None else f" ({share:.2%} >100)"
    return f"{row.issue_delay_p50_us:.0f}/{row.issue_delay_p99_us:.0f}{late}"


def _cells(row: Any, status: str) -> tuple[str, ...]:
    target = f"p{row.target_percentile * 100:g}"
    latency = with_interval(
        row.latency_target_ms,
        row.latency_target_ci_low_ms,
        row.latency_target_ci_high_ms,
        _two_decimals,
    )
    bound = (
        fmt(row.latency_bound_ms, "{:.2f}")
        if row.latency_bound_ms is not None
        else f"- (<{row.queries_for_bound} q)"
    )
    return (
        str(row.trial),
        row.phase,
        row.pipeline,
        status,
        str(row.ok),
        str(row.failed),
        with_interval(
            row.throughput_qps, row.throughput_ci_low, row.throughput_ci_high, _one_decimal
        ),
        f"{target} {latency}",
        fmt(row.completed_p99_ms, "{:.2f}"),
        bound,
        _slo(row),
        _schedule_kept(row),
    )


def summary_table(result: Any) -> Table:
    """Headline figures per pipeline and phase, from the warehouse's views over the run
    directory (warm-up excluded): ok and failed queries, q/s and the scenario's verdict
    percentile (failures count as infinite) with their 95% intervals, the completed-only p99,
    LoadGen's early-stopping bound, the SLO verdict (met, missed or undecided) and how well
    the issuer kept the schedule (issue delay p50/p99, share issued more than 100 us late)."""
    from analysis.reports.headline_figures import (
        summarize_run,  # the CLI is the one place stages meets analysis
    )

    statuses = {(o.trial, o.phase, o.pipeline): o.status for o in result.results}
    table = Table(
        title="summary (warm-up excluded; latency in ms, failures count as inf; [95% interval])",
        title_justify="left",
    )
    for column in COLUMNS:
        table.add_column(column, no_wrap=True)
    for row in summarize_run(result.run_dir):
        table.add_row(*_cells(row, statuses.get((row.trial, row.phase, row.pipeline), "?")))
    return table

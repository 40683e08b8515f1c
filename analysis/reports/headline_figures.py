"""Per-pipeline, per-phase headline figures of one run directory, from the warehouse's views.

The run directory is loaded into an in-memory DuckDB with the warehouse's schema and view files,
and the figures are read from `throughput` and `latency`: the console summary, the manifest,
MLflow and `collobench report` therefore share one implementation of every figure. Each
scenario reports the percentile MLPerf names for it (p90 for single_stream, p99 otherwise) over
every measured query (failures as +inf), LoadGen's early-stopping estimate of it, and the
three-valued verdict on `slo_ms` (stages.contracts.slo_verdict.slo_verdict_by_counts): met by
LoadGen's early-stopping rule, missed by its mirror binomial test, else undecided.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from analysis.reports.early_stopping import early_stopping_percentile, over_slo_count
from analysis.warehouse.definitions_db import definitions_database, fill
from analysis.warehouse.loader import prepare_run
from analysis.warehouse.sql_files import sql_text
from analysis.warehouse.view_manifest import files_defining
from stages.contracts.slo_verdict import SloVerdict, slo_verdict_by_counts
from stages.rundir.manifest import LoadgenPart, read_manifest, read_manifest_document

TARGET_PERCENTILE = {"single_stream": 0.90}  # every other scenario: 0.99
SUMMARY_TABLES = ("queries",)  # the only table the summary's views read (host_load: + samples)
# The views summary_figures.sql and summary_verdict_latencies.sql read.
SUMMARY_VIEWS = ("throughput", "latency", "query_latency")
PHASE_ORDER = {"solo": 0, "collocated": 1}  # then subset phases `collocated:a+b`, by name


@dataclass(frozen=True)
class PhaseSummary:
    """Headline figures of one pipeline in one phase of one trial (warm-up excluded).

    latency_* are verdict percentiles (every measured query, failures as +inf); completed_*
    count ok queries only. *_ci_low/_ci_high: 95% intervals (method in ci_method), None where
    none could be computed."""

    trial: int
    phase: str
    pipeline: str
    scenario: str
    measured: int  # every non-warm-up query of the window
    ok: int
    failed: int  # measured - ok
    errors: int
    dropped: int
    timeouts: int
    not_issued: int
    throughput_qps: float | None
    throughput_ci_low: float | None
    throughput_ci_high: float | None
    throughput_samples_per_s: float | None
    latency_p50_ms: float | None
    latency_p50_ci_low_ms: float | None
    latency_p50_ci_high_ms: float | None
    latency_p99_ms: float | None
    latency_p99_ci_low_ms: float | None
    latency_p99_ci_high_ms: float | None
    target_percentile: float
    latency_target_ms: float | None  # the verdict percentile the scenario names
    latency_target_ci_low_ms: float | None
    latency_target_ci_high_ms: float | None
    completed_p50_ms: float | None
    completed_p99_ms: float | None
    completed_target_ms: float | None  # the scenario's percentile over ok queries only
    latency_bound_ms: float | None  # LoadGen's early-stopping estimate; None: too few queries
    queries_for_bound: int  # LoadGen's minimum query count for an estimate (662 for p99)
    slo_ms: float | None
    over_slo: int | None  # measured queries over slo_ms (failures among them); None: no SLO
    slo_verdict: SloVerdict | None  # met | missed | undecided on slo_ms; None without an SLO
    issue_delay_p50_us: float | None
    issue_delay_p99_us: float | None
    issue_delay_over_100us_share: float | None  # issued more than 100 us after the schedule
    from_issue_p50_ms: float | None
    from_issue_p99_ms: float | None
    ci_method: str | None  # batch_means_10 within one trial


@contextmanager
def open_run_views(
    run_dir: Path, tables: tuple[str, ...], views: tuple[str, ...]
) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory database holding these tables of the run directory (merged or from
    parts/), the `views` (and what they read) and their summaries, computed by the loader's
    own code path. Only those views: this runs after every phase of every run."""
    run = prepare_run(run_dir, read_manifest_document(run_dir), tables)
    with definitions_database([run], files=files_defining(frozenset(views))) as connection:
        fill(connection)
        yield connection


def _loadgens(run_dir: Path) -> dict[str, LoadgenPart]:
    return {p.name: p.loadgen for p in read_manifest(run_dir).spec.pipelines}


def _summaries(run_dir: Path, trial: int | None, phase: str | None) -> list[PhaseSummary]:
    run_dir = Path(run_dir)
    loadgens = _loadgens(run_dir)
    parameters = {"trial": trial, "phase": phase}
    with open_run_views(run_dir, SUMMARY_TABLES, SUMMARY_VIEWS) as connection:
        result = connection.execute(sql_text("summary_figures.sql"), parameters)
        names = [column[0] for column in result.description or []]
        rows = [dict(zip(names, row, strict=True)) for row in result.fetchall()]
        verdicts = {
            (row[0], row[1], row[2]): list(row[3])
            for row in connection.execute(
                sql_text("summary_verdict_latencies.sql"), parameters
            ).fetchall()
        }
    summaries = [_summary(row, loadgens, verdicts) for row in rows]
    return sorted(
        summaries, key=lambda s: (s.trial, PHASE_ORDER.get(s.phase, 2), s.phase, s.pipeline)
    )


def _summary(
    row: dict[str, Any],
    loadgens: dict[str, LoadgenPart],
    verdicts: dict[tuple[int, str, str], list[float]],
) -> PhaseSummary:
    loadgen = loadgens.get(str(row["pipeline"]), LoadgenPart())
    scenario = loadgen.type or "?"
    percentile = TARGET_PERCENTILE.get(scenario, 0.99)
    target = "p90" if percentile == 0.90 else "p99"
    latencies = verdicts.get((row["trial"], row["phase"], row["pipeline"]), [])
    estimate = early_stopping_percentile(latencies, percentile)
    slo = loadgen.slo_ms
    over_slo = None if slo is None else over_slo_count(latencies, float(slo))
    return PhaseSummary(
        trial=int(row["trial"]),
        phase=str(row["phase"]),
        pipeline=str(row["pipeline"]),
        scenario=scenario,
        measured=int(row["measured_queries"]),
        ok=int(row["ok_queries"]),
        failed=int(row["failed_queries"]),
        errors=int(row["errors"]),
        dropped=int(row["dropped"]),
        timeouts=int(row["timeouts"]),
        not_issued=int(row["not_issued"]),
        throughput_qps=row["queries_per_s"],
        throughput_ci_low=row["queries_per_s_ci_low"],
        throughput_ci_high=row["queries_per_s_ci_high"],
        throughput_samples_per_s=row["samples_per_s"],
        latency_p50_ms=row["latency_p50_ms"],
        latency_p50_ci_low_ms=row["latency_p50_ci_low_ms"],
        latency_p50_ci_high_ms=row["latency_p50_ci_high_ms"],
        latency_p99_ms=row["latency_p99_ms"],
        latency_p99_ci_low_ms=row["latency_p99_ci_low_ms"],
        latency_p99_ci_high_ms=row["latency_p99_ci_high_ms"],
        target_percentile=percentile,
        latency_target_ms=row[f"latency_{target}_ms"],
        latency_target_ci_low_ms=row[f"latency_{target}_ci_low_ms"],
        latency_target_ci_high_ms=row[f"latency_{target}_ci_high_ms"],
        completed_p50_ms=row["completed_p50_ms"],
        completed_p99_ms=row["completed_p99_ms"],
        completed_target_ms=row[f"completed_{target}_ms"],
        latency_bound_ms=estimate.latency,
        queries_for_bound=estimate.queries_needed,
        slo_ms=slo,
        over_slo=over_slo,
        slo_verdict=(
            None
            if over_slo is None
            else slo_verdict_by_counts(len(latencies), over_slo, percentile)
        ),
        issue_delay_p50_us=row["issue_delay_p50_us"],
        issue_delay_p99_us=row["issue_delay_p99_us"],
        issue_delay_over_100us_share=row["issue_delay_over_100us_share"],
        from_issue_p50_ms=row["from_issue_p50_ms"],
        from_issue_p99_ms=row["from_issue_p99_ms"],
        ci_method=row["latency_ci_method"] or row["throughput_ci_method"],
    )


def verdict_latencies(run_dir: Path) -> dict[str, list[float]]:
    """Per pipeline, every measured query's verdict latency in ms (failures as +inf), in
    scheduled order: the same rows and SQL as the summary's verdict (trials and phases one
    after the other; a capacity probe has one of each)."""
    with open_run_views(Path(run_dir), SUMMARY_TABLES, SUMMARY_VIEWS) as connection:
        rows = connection.execute(
            sql_text("summary_verdict_latencies.sql"), {"trial": None, "phase": None}
        ).fetchall()
    latencies: dict[str, list[float]] = {}
    for _trial, _phase, pipeline, values in sorted(
        rows, key=lambda row: (row[0], PHASE_ORDER.get(row[1], 2), row[1], row[2])
    ):
        latencies.setdefault(str(pipeline), []).extend(float(value) for value in values)
    return latencies


def summarize_run(run_dir: Path) -> list[PhaseSummary]:
    """One summary per (trial, phase, pipeline) of the run, warm-up excluded."""
    return _summaries(Path(run_dir), None, None)


def summarize_phase(run_dir: Path, trial: int, phase: str) -> list[PhaseSummary]:
    """The summaries of one phase of one trial (what the launcher shows at each phase end)."""
    return _summaries(Path(run_dir), trial, phase)


def headline_metrics(summary: PhaseSummary, *, finite_only: bool = True) -> dict[str, float]:
    """What the manifest records and MLflow logs per (trial, phase, pipeline): counts,
    queries/s and verdict and completed p50/p99 with their interval bounds, the scenario's
    target percentile, the early-stopping bound, the issue delay p50/p99 and the share issued
    more than 100 us late and, with an SLO, slo_ms, the over-SLO count
    and the verdict as two flags (slo_met, slo_missed; both 0: undecided), the verdict's name
    travelling beside these numbers (PhaseSummary.slo_verdict). MLflow rejects inf, so by
    default only finite values; `finite_only=False` keeps infinite percentiles (a failure
    count past the rank)."""
    metrics: dict[str, float | int | None] = {
        "target_percentile": summary.target_percentile,
        "latency_target_ms": summary.latency_target_ms,
        "latency_target_ci_low_ms": summary.latency_target_ci_low_ms,
        "latency_target_ci_high_ms": summary.latency_target_ci_high_ms,
        "completed_target_ms": summary.completed_target_ms,
        "queries_measured": summary.measured,
        "queries_ok": summary.ok,
        "queries_failed": summary.failed,
        "queries_dropped": summary.dropped,
        "queries_errors": summary.errors,
        "queries_timeouts": summary.timeouts,
        "queries_not_issued": summary.not_issued,
        "queries_per_s": summary.throughput_qps,
        "queries_per_s_ci_low": summary.throughput_ci_low,
        "queries_per_s_ci_high": summary.throughput_ci_high,
        "latency_p50_ms": summary.latency_p50_ms,
        "latency_p50_ci_low_ms": summary.latency_p50_ci_low_ms,
        "latency_p50_ci_high_ms": summary.latency_p50_ci_high_ms,
        "latency_p99_ms": summary.latency_p99_ms,
        "latency_p99_ci_low_ms": summary.latency_p99_ci_low_ms,
        "latency_p99_ci_high_ms": summary.latency_p99_ci_high_ms,
        "completed_p50_ms": summary.completed_p50_ms,
        "completed_p99_ms": summary.completed_p99_ms,
        "latency_bound_ms": summary.latency_bound_ms,
        # How well the run kept its schedule (issued_ns - scheduled_ns).
        "issue_delay_p50_us": summary.issue_delay_p50_us,
        "issue_delay_p99_us": summary.issue_delay_p99_us,
        "issue_delay_over_100us_share": summary.issue_delay_over_100us_share,
    }
    if summary.slo_verdict is not None:
        metrics["slo_ms"] = summary.slo_ms
        metrics["queries_over_slo"] = summary.over_slo
        metrics["slo_met"] = float(summary.slo_verdict == "met")
        metrics["slo_missed"] = float(summary.slo_verdict == "missed")
    return {
        name: float(value)
        for name, value in metrics.items()
        if value is not None and (math.isfinite(value) or not finite_only)
    }


def phase_warnings(run_dir: Path, trial: int, phase: str) -> list[str]:
    """Warnings about one phase's load windows, from the `host_load` view: CPU taken by
    something other than the benchmark's workers, harness and services
    (`foreign_cpu_warning`)."""
    with open_run_views(Path(run_dir), ("queries", "host_samples"), ("host_load",)) as connection:
        rows = connection.execute(
            sql_text("summary_host_load.sql"), {"trial": trial, "phase": phase}
        ).fetchall()
    return [
        f"trial {trial} {phase}{f' ({pipeline})' if pipeline else ''}: {foreign:.2f} cores of "
        f"foreign CPU load in the load window (host {host:.2f}, workers {workers:.2f}, harness "
        f"{harness:.2f}{f', services {services:.2f}' if services else ''}); its figures may "
        "be disturbed"
        for pipeline, host, workers, harness, services, foreign in rows
    ]

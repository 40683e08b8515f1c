"""Per-pipeline, per-phase headline figures of one run directory, read straight from its
Parquet files (the file contract; nothing of `stages` is imported).

Each scenario reports the figure MLPerf names for it (p90 for single_stream, p99 otherwise,
throughput for offline), with the early-stopping bound and whether `slo_ms` was met.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from analysis.early_stopping import early_stopping_percentile

TARGET_PERCENTILE = {"single_stream": 0.90}  # every other scenario: 0.99


@dataclass(frozen=True)
class PhaseSummary:
    trial: int
    phase: str
    pipeline: str
    scenario: str
    ok: int
    errors: int
    dropped: int
    timeouts: int
    throughput_qps: float | None
    throughput_samples_per_s: float | None
    latency_p50_ms: float | None
    target_percentile: float
    latency_target_ms: float | None  # the sample percentile
    latency_bound_ms: float | None  # early-stopping bound (99% confidence); None: too few
    slo_ms: float | None
    slo_met: bool | None
    issue_delay_p50_us: float | None
    issue_delay_p99_us: float | None


def read_queries(run_dir: Path) -> pd.DataFrame:
    """The run's queries, merged or (for a cut-short run) from its chunk files."""
    run_dir = Path(run_dir)
    paths = [
        run_dir / "queries.parquet",
        *sorted((run_dir / "parts" / "queries").glob("*.parquet")),
    ]
    tables = [pq.read_table(path) for path in paths if path.exists()]
    if not tables:
        return pd.DataFrame()
    return pa.concat_tables(tables).to_pandas()


def _quantile(values: pd.Series, q: float) -> float | None:
    return float(values.quantile(q)) if len(values) else None


def summarize_run(run_dir: Path) -> list[PhaseSummary]:
    """One summary per (trial, phase, pipeline), warm-up excluded."""
    manifest = json.loads((Path(run_dir) / "manifest.json").read_text())
    loadgens = {p["name"]: p["loadgen"] for p in manifest["spec"]["pipelines"]}
    queries = read_queries(run_dir)
    if queries.empty:
        return []
    queries = queries[~queries["warmup"]]
    summaries = []
    for (trial, phase, pipeline), group in queries.groupby(["trial", "phase", "pipeline"]):
        loadgen = loadgens.get(str(pipeline), {})
        scenario = str(loadgen.get("type", "?"))
        percentile = TARGET_PERCENTILE.get(scenario, 0.99)
        ok = group[group["status"] == "ok"]
        latency_ms = (ok["completed_ns"] - ok["scheduled_ns"]) / 1e6
        delay_us = (group["issued_ns"] - group["scheduled_ns"]).dropna() / 1e3
        window_s = (ok["completed_ns"].max() - group["scheduled_ns"].min()) / 1e9 if len(ok) else 0
        bound = early_stopping_percentile(latency_ms.tolist(), percentile, 0.99)
        slo = loadgen.get("slo_ms")
        counts = group["status"].value_counts()
        summaries.append(
            PhaseSummary(
                trial=int(trial),
                phase=str(phase),
                pipeline=str(pipeline),
                scenario=scenario,
                ok=int(counts.get("ok", 0)),
                errors=int(counts.get("error", 0)),
                dropped=int(counts.get("dropped", 0)),
                timeouts=int(counts.get("timeout", 0)),
                throughput_qps=len(ok) / window_s if window_s > 0 else None,
                throughput_samples_per_s=float(ok["samples"].sum()) / window_s
                if window_s > 0
                else None,
                latency_p50_ms=_quantile(latency_ms, 0.5),
                target_percentile=percentile,
                latency_target_ms=_quantile(latency_ms, percentile),
                latency_bound_ms=bound.latency,
                slo_ms=slo,
                slo_met=None if slo is None or bound.latency is None else bound.latency <= slo,
                issue_delay_p50_us=_quantile(delay_us, 0.5),
                issue_delay_p99_us=_quantile(delay_us, 0.99),
            )
        )
    phase_order = {"solo": 0, "collocated": 1}
    return sorted(summaries, key=lambda s: (s.trial, phase_order.get(s.phase, 2), s.pipeline))

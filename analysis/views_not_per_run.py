"""The warehouse views the per-run report leaves out, declared for the report catalogue: the
capacity views, reported per capacity search or region (`key`) with these columns, and the
views no report shows, each with why. analysis.report_catalogue checks that every warehouse
view is named in one of its tables or here.
"""

from __future__ import annotations

from analysis.report_entries import ReportView, names
from stages.rundir.schemas import TABLES

NOT_REPORTED_FILE = "analysis/views_not_per_run.py"

# The capacity views (issue 19), reported per capacity search (`search_id`) or region
# (`region_id`), not per run: analysis.capacity_warehouse.capacity_table reads them, the capacity
# command prints them with these columns.
CAPACITY_CATALOGUE: tuple[ReportView, ...] = (
    ReportView(
        "capacity",
        key="search_id",
        order_by=("search_id",),
        terminal=names(
            "search_id pipeline slo_ms percentile certified_qps estimate_qps "
            "estimate_qps_ci_low estimate_qps_ci_high bracket_lo bracket_hi bracket_ratio "
            "stop_reason probes undecided_probes flagged_probes aborted_probes "
            "monotonicity_violations"
        ),
    ),
    ReportView(
        "capacity_region",
        key="region_id",
        order_by=("region_id", "ray_index"),
        terminal=names(
            "region_id angle_deg certified_s certified_x certified_y certified_sum estimate_s "
            "estimate_s_ci_low estimate_s_ci_high estimate_sum estimate_sum_ci_low "
            "estimate_sum_ci_high stop_reason"
        ),
    ),
)

BY_CAPACITY_VIEW: dict[str, ReportView] = {entry.view: entry for entry in CAPACITY_CATALOGUE}

# Warehouse views that are not reported per run, and why; views named `<x>_from_rows` are the
# definitions of a summary table (`x` reads the table) and need no entry.
NOT_REPORTED: dict[str, str] = {
    "run_history": "every run of a spec, not one run: `collobench history` and the Dagster "
    "`history` asset judge it (analysis.history)",
    "query_latency": "one row per query: the building block of latency and goodput",
    "pipeline_outcomes": "each pipeline's counts from the manifest: read by throughput",
    "pipeline_specs": "each pipeline's spec fields: read by the other views",
    "run_warnings": "the manifest's warnings: the run summary prints them",
    "load_windows": "each phase's load window: read by the energy and host views",
    "energy_samples": "telemetry samples with energy: read by energy",
    "idle_power": "the idle baseline: read by energy_comparison",
    "energy_comparison": "energy against the idle baseline: `collobench sql`",
    "phase_figures": "each phase's headline figures: read by contention and interference",
    "host_load": "host CPU load per window: the run summary's foreign-load warnings",
    "profiled_queries": "profiled queries: read by operator_summary",
    "server_metrics": "one row per scrape of a service's metrics: drawn under the timeline "
    "plot (timeline.png); `collobench sql`",
    "server_metric_names": "the servers' metric names mapped to common figures: read by "
    "server_metrics",
    "sessions": "per turn of multi-turn sessions (TTFT per turn, history growth): "
    "`collobench sql \"SELECT * FROM sessions\"`; a session's duration is its query's latency",
    **{table: "raw rows: a view over the loaded runs' Parquet files" for table in TABLES},
}

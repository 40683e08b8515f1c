"""The warehouse views the per-run report leaves out, declared for the report catalogue: the
capacity views, reported per capacity search or region (`key`) with these columns, and the
views no report shows, each with why (declared in their view file's entry of
analysis.warehouse.view_manifest, and the raw tables). analysis.reports.catalogue checks that every
warehouse view is named in one of its tables or here.
"""

from __future__ import annotations

from analysis.reports.report_entries import ReportView, names
from analysis.warehouse.view_manifest import not_reported
from stages.rundir.schemas import TABLES

NOT_REPORTED_FILE = "analysis/reports/views_not_per_run.py"
"""Where CAPACITY_CATALOGUE is (NOT_REPORTED: analysis/warehouse/view_manifest.py,
`not_reported`)."""

# The capacity views (issue 19), reported per capacity search (`search_id`) or region
# (`region_id`), not per run: analysis.capacity.warehouse_tables.capacity_table reads them,
# the capacity command prints them with these columns.
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

# Warehouse views that are not reported per run, and why: the view files' entries
#  (analysis.warehouse.view_manifest, `not_reported`) and the raw tables; views named
# `<x>_from_rows` are the definitions of a summary table (`x` reads the table) and need no entry.
NOT_REPORTED: dict[str, str] = {
    **not_reported(),
    **{table: "raw rows: a view over the loaded runs' Parquet files" for table in TABLES},
}

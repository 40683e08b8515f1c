"""Report assets (group `reports`): throughput, latency, perf_per_watt and contention of a
partition's latest run, as Markdown tables read from the warehouse views (analysis.report,
read-only) and the report's PNG plots.

Dagster has no image metadata type: each plot is inlined in Markdown metadata as a base64
`data:` URI (the UI renders it) and its file is given as a path. The plots are the ones
`analysis.report_file.write_report` wrote beside the run (the `warehouse` step writes them).
"""

import base64
from pathlib import Path
from typing import Any

import dagster as dg

from bench_defs.resources import WarehouseResource
from bench_defs.specs import spec_partitions
from bench_defs.warehouse import latest_run, warehouse

REPORTS_GROUP = "reports"

# (view, Markdown columns (header, cell spec as analysis.report_file.markdown_table reads it))
COLUMNS: dict[str, list[tuple[str, str]]] = {
    "throughput": [
        ("trial", "trial"),
        ("phase", "phase"),
        ("pipeline", "pipeline"),
        ("q/s", "queries_per_s|queries_per_s_ci_low|queries_per_s_ci_high"),
        ("ok", "ok_queries"),
        ("dropped", "dropped"),
        ("errors", "errors"),
        ("interval method", "ci_method"),
    ],
    "latency": [
        ("trial", "trial"),
        ("phase", "phase"),
        ("pipeline", "pipeline"),
        ("p50 ms", "latency_p50_ms|latency_p50_ci_low_ms|latency_p50_ci_high_ms"),
        ("p99 ms", "latency_p99_ms|latency_p99_ci_low_ms|latency_p99_ci_high_ms"),
        ("failed", "failed_queries"),
        ("interval method", "ci_method"),
    ],
    "perf_per_watt": [
        ("trial", "trial"),
        ("phase", "phase"),
        ("pipeline", "pipeline"),
        ("device", "device"),
        ("energy source", "energy_source"),
        ("energy J", "energy_j"),
        ("mean W", "mean_power_w"),
        ("queries/J", "queries_per_j"),
        ("J/query", "j_per_query"),
    ],
    "contention": [
        ("trial", "trial"),
        ("pipeline", "pipeline"),
        ("throughput ratio", "throughput_ratio|throughput_ratio_ci_low|throughput_ratio_ci_high"),
        ("verdict", "throughput_verdict"),
        ("p50 slowdown", "p50_slowdown|p50_slowdown_ci_low|p50_slowdown_ci_high"),
        ("p99 slowdown", "p99_slowdown|p99_slowdown_ci_low|p99_slowdown_ci_high"),
        ("verdict ", "p99_verdict"),
    ],
}
PLOTS: dict[str, list[str]] = {
    "throughput": ["timeline.png"],
    "latency": ["latency_cdf.png", "stage_breakdown.png"],
    "perf_per_watt": ["timeline.png"],
    "contention": ["contention.png"],
}
EMPTY_NOTE: dict[str, str] = {
    "perf_per_watt": "No energy source measured this run (no NVML, RAPL or power model).",
    "contention": "No contention: the run has no collocated phase with solo baselines.",
}


def image_markdown(path: Path, title: str) -> str:
    """A PNG inlined as a base64 data URI in Markdown (what Dagster's UI can render)."""
    encoded = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"![{title}](data:image/png;base64,{encoded})"


def report_metadata(
    view: str, frame: Any, run_id: str, run_dir: Path
) -> dict[str, dg.MetadataValue]:
    """The metadata of one report asset: the table, the plots inline and their paths."""
    from analysis.report_file import markdown_table

    table = (
        markdown_table(frame, COLUMNS[view])
        if not frame.empty
        else EMPTY_NOTE.get(view, "No rows for this run.")
    )
    metadata: dict[str, dg.MetadataValue] = {
        "run_id": dg.MetadataValue.text(run_id),
        "rows": dg.MetadataValue.int(len(frame)),
        "table": dg.MetadataValue.md(table),
    }
    for file_name in PLOTS[view]:
        path = run_dir / file_name
        stem = file_name.removesuffix(".png")
        if path.is_file():
            metadata[f"plot_{stem}"] = dg.MetadataValue.md(image_markdown(path, stem))
            metadata[f"plot_{stem}_path"] = dg.MetadataValue.path(str(path))
    return metadata


def _report_asset(view: str, description: str) -> dg.AssetsDefinition:
    @dg.asset(
        name=view,
        partitions_def=spec_partitions,
        deps=[warehouse],
        group_name=REPORTS_GROUP,
        kinds={"duckdb"},
        description=description,
    )
    def report_asset(
        context: dg.AssetExecutionContext, duckdb_warehouse: WarehouseResource
    ) -> dg.MaterializeResult:
        run = latest_run(context)
        frames = duckdb_warehouse.report(run.run_id, [view])
        return dg.MaterializeResult(
            metadata=report_metadata(view, frames[view], run.run_id, run.run_dir),
            data_version=dg.DataVersion(run.run_id),
        )

    return report_asset


REPORTS: dict[str, str] = {
    "throughput": "Ok queries per second per trial, phase and pipeline, with 95% intervals; "
    "the timeline plot.",
    "latency": "p50 and p99 from the scheduled arrival, with 95% intervals; the latency CDF "
    "and stage breakdown plots.",
    "perf_per_watt": "Queries per joule with the energy source named; the timeline plot.",
    "contention": "Collocated vs solo: throughput ratio and p50/p99 slowdowns with intervals "
    "and verdicts; the contention heatmap.",
}
report_assets: list[dg.AssetsDefinition] = [
    _report_asset(view, description) for view, description in REPORTS.items()
]

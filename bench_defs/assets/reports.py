"""Report assets (group `reports`): one per view the report catalogue gives an asset
(analysis.reports.catalogue: throughput, latency, perf_per_watt, contention) for a partition's
latest run, as Markdown tables read from the warehouse views (analysis.reports.report, read-only)
and the report's PNG plots; and `history`, the partition's runs judged across runs
(analysis.history.verdicts) with the plot of the series.

Dagster has no image metadata type: each plot is inlined in Markdown metadata as a base64
`data:` URI (the UI renders it) and its file is given as a path. The plots are the ones
`analysis.reports.report_file.write_report` wrote beside the run (the `warehouse` step writes them).
"""

from pathlib import Path
from typing import Any

import dagster as dg

from analysis.reports.catalogue import CATALOGUE, PLOTS
from analysis.reports.report_entries import Asset
from bench_defs.assets.warehouse import latest_run, warehouse
from bench_defs.core.image_metadata import image_markdown
from bench_defs.core.resources import WarehouseResource
from bench_defs.core.specs import spec_partitions

REPORTS_GROUP = "reports"

# The views with a report asset, their tables, plots and notes (analysis.reports.catalogue).
ASSET_VIEWS: dict[str, Asset] = {view.view: view.asset for view in CATALOGUE if view.asset}
PLOT_FILES: dict[str, str] = {plot.key: plot.file_name for plot in PLOTS}


def report_metadata(
    view: str, frame: Any, run_id: str, run_dir: Path
) -> dict[str, dg.MetadataValue]:
    """The metadata of one report asset: the table, the plots inline and their paths."""
    from analysis.reports.report_file import markdown_table

    asset = ASSET_VIEWS[view]
    table = markdown_table(frame, asset.columns) if not frame.empty else asset.empty_note
    metadata: dict[str, dg.MetadataValue] = {
        "run_id": dg.MetadataValue.text(run_id),
        "rows": dg.MetadataValue.int(len(frame)),
        "table": dg.MetadataValue.md(table),
    }
    for plot in asset.plots:
        file_name = PLOT_FILES[plot]
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


HISTORY_PLOT = "history.png"


@dg.asset(
    name="history",
    partitions_def=spec_partitions,
    deps=[warehouse],
    group_name=REPORTS_GROUP,
    kinds={"duckdb"},
    description="The benchmark's runs in time order on each machine class, every figure judged "
    "against the runs before it (regressed, improved, no change, undecided), change points, "
    "causes and the smallest change the history can see; with the plot of the series.",
)
def history(
    context: dg.AssetExecutionContext, duckdb_warehouse: WarehouseResource
) -> dg.MaterializeResult:
    from analysis.history.history_plot import plot_history
    from analysis.history.verdicts import history_connection
    from analysis.reports.report_file import markdown_table
    from bench_defs.checks.history_checks import VERDICT_MARKDOWN

    run = latest_run(context)
    with duckdb_warehouse.reader() as connection:
        found = connection.execute(
            "SELECT spec_hash FROM runs WHERE run_id = ?", [run.run_id]
        ).fetchone()
        spec_hash = str(found[0]) if found and found[0] else ""
        frame = history_connection(connection, spec_hash)
    latest = frame[frame["run_id"] == run.run_id]
    latest = latest.assign(
        change_low=[c[0] if c else None for c in latest["change_ci95"]],
        change_high=[c[1] if c else None for c in latest["change_ci95"]],
    )
    metadata: dict[str, Any] = {
        "run_id": dg.MetadataValue.text(run.run_id),
        "runs": dg.MetadataValue.int(int(frame["run_id"].nunique())),
        "change_points": dg.MetadataValue.int(int(frame["change_point"].sum())),
        "latest_run": dg.MetadataValue.md(
            markdown_table(latest, VERDICT_MARKDOWN) if not latest.empty else "no figures"
        ),
    }
    path = plot_history(frame, run.run_dir / HISTORY_PLOT, f"{context.partition_key}: history")
    if path is not None:
        metadata["plot_history"] = dg.MetadataValue.md(image_markdown(path, "history"))
        metadata["plot_history_path"] = dg.MetadataValue.path(str(path))
    return dg.MaterializeResult(metadata=metadata, data_version=dg.DataVersion(run.run_id))


report_assets: list[dg.AssetsDefinition] = [
    *(_report_asset(view, asset.description) for view, asset in ASSET_VIEWS.items()),
    history,
]

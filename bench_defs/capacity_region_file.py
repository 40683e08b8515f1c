"""A region's summary from Dagster's separate runs: after each ray, region.json, its report and
plot (rays on axes normalised by the solo capacities, x + y = 1 for reference) are rewritten
from the searches finished so far (stages.capacity.region.region_from_searches), and loaded
into the warehouse, so the last ray to finish leaves the complete region."""

from pathlib import Path
from typing import Any

import dagster as dg

from bench_defs.capacity_keys import CapacityTarget
from bench_defs.reports import image_markdown


def write_region_summary(
    spec_path: Path,
    target: CapacityTarget,
    out: Path,
    plan_metadata: dict[str, Any],
    percentile: float,
    db_path: Path,
) -> dict[str, Any]:
    """Rewrite `<out>/<region id>/region.json` (+ report.md, region_plot.png), load it; the
    metadata entries that name them. Raises what the region code raises."""
    from analysis.capacity import load_capacity_dirs
    from analysis.capacity_report import write_region_report
    from stages.capacity.region import region_from_searches
    from stages.capacity.region_store import write_region
    from stages.spec.loading import load_spec

    assert target.region is not None and target.rays is not None
    region_id = str(plan_metadata["region_id"])
    solo_ids = dict(plan_metadata["solo_search_ids"].value)
    region = region_from_searches(
        load_spec(spec_path), target.region, target.rays, out, region_id, percentile, solo_ids
    )
    region_dir = out / region_id
    path = write_region(region_dir, region)
    report = write_region_report(region_dir)
    load_capacity_dirs([region_dir], db_path, probe_runs=False)
    metadata: dict[str, Any] = {
        "region_json": dg.MetadataValue.path(str(path)),
        "region_rays_done": f"{len(region.rays)} of {target.rays}",
        "region_complete": region.complete,
        "region_report": dg.MetadataValue.path(str(report)),
    }
    plot = region_dir / "region_plot.png"
    if plot.is_file():
        metadata["region_plot"] = dg.MetadataValue.md(image_markdown(plot, "capacity region"))
    return metadata

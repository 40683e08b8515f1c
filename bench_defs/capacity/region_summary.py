"""A region's summary from Dagster's separate runs: after each ray, region.json, its report and
plot (rays on axes normalised by the solo capacities, x + y = 1 for reference) are rewritten
from the searches finished so far (stages.capacity.region.region_from_searches), and loaded
into the warehouse, so the last ray to finish leaves the complete region. The rays run on
several hosts at once, so each summary is written under an exclusive `flock` of
`<region dir>/.summary.lock`: the last summary in lock order sees every ray whose capacity.json
was written before its own summary began, and no earlier, partial summary overwrites it."""

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg

from bench_defs.capacity.keys import CapacityTarget
from bench_defs.core.image_metadata import image_markdown


@contextlib.contextmanager
def summary_lock(region_dir: Path) -> Iterator[None]:
    """Hold an exclusive flock on `<region_dir>/.summary.lock` (the region's rays, on other
    hosts of a cluster, wait for it; a shared folder must support flock: NFSv4, CephFS)."""
    region_dir.mkdir(parents=True, exist_ok=True)
    with (region_dir / ".summary.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
    from analysis.capacity.report_markdown import write_region_report
    from analysis.capacity.warehouse_tables import load_capacity_dirs
    from stages.capacity.region import region_from_searches
    from stages.capacity.region_store import write_region
    from stages.validation.loading import load_spec

    assert target.region is not None and target.rays is not None
    region_id = str(plan_metadata["region_id"])
    solo_ids = dict(plan_metadata["solo_search_ids"].value)
    region_dir = out / region_id
    with summary_lock(region_dir):
        region = region_from_searches(
            load_spec(spec_path), target.region, target.rays, out, region_id, percentile, solo_ids
        )
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

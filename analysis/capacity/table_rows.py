"""The rows of the capacity tables made of a search's or region's records (file_reader): one
`capacity_searches` row per search, one `capacity_probes` row per probe, one
`capacity_region_rays` row per ray, each the parameters of its insert file under
analysis/sql/capacity/."""

from __future__ import annotations

import json
import math
from typing import Any

from analysis.capacity.file_reader import RegionFiles, SearchFiles
from stages.contracts.capacity_files import ProbeRecord, RayResult


def _pair(value: tuple[float, float | None] | None) -> tuple[float | None, float | None]:
    """A (low, high) pair's two ends (None for a missing end or a missing pair)."""
    return (None, None) if value is None else value


def search_row(files: SearchFiles) -> dict[str, Any]:
    """The capacity_searches row of a search (insert_search.sql's parameters)."""
    settings, result = files.settings, files.result
    ci_low, ci_high = _pair(result.estimate_ci95 if result is not None else None)
    bracket_lo, bracket_hi = _pair(result.bracket if result is not None else None)
    ray = settings.ray if settings is not None else None
    return {
        "search_id": files.search_id,
        "pipeline": files.pipeline,
        "slo_ms": files.slo_ms,
        "percentile": files.percentile,
        "precision": settings.precision if settings is not None else None,
        "max_probes": settings.max_probes if settings is not None else None,
        "probe_s": settings.probe_s if settings is not None else None,
        "with_rates": json.dumps(files.with_rates, sort_keys=True),
        "ray": None if ray is None else json.dumps(ray, sort_keys=True),
        "base_seed": settings.base_seed if settings is not None else None,
        "min_rate": settings.min_rate if settings is not None else None,
        "spec_source": settings.spec_source if settings is not None else None,
        "spec_hash": settings.spec_hash if settings is not None else None,
        "certified_qps": result.certified_qps if result is not None else None,
        "estimate_qps": result.estimate_qps if result is not None else None,
        "estimate_ci95_low": ci_low,
        "estimate_ci95_high": ci_high,
        "bracket_lo": bracket_lo,
        "bracket_hi": bracket_hi,
        "stop_reason": result.stop_reason if result is not None else None,
        "ceiling_qps": result.ceiling_qps if result is not None else None,
        "monotonicity_violations": result.monotonicity_violations if result is not None else None,
        "flagged_probes": result.flagged_probes if result is not None else None,
        "probes": len(files.probes),
        "estimate_method": result.estimate_method if result is not None else None,
        "complete": result is not None,
        "search_dir": str(files.search_dir.resolve()),
        # capacity II: NULL for a search written before its endings and budget
        "stop_detail": result.stop_detail if result is not None else None,
        "spent_s": result.spent_s if result is not None else None,
        "budget_s": settings.budget_s if settings is not None else None,
        "min_queries": settings.min_queries if settings is not None else None,
    }


def probe_row(search_id: str, probe: ProbeRecord) -> dict[str, Any]:
    """The capacity_probes row of one probe record (insert_probe.sql's parameters)."""
    pipelines = {name: figures.model_dump(mode="json") for name, figures in probe.pipelines.items()}
    return {
        "search_id": search_id,
        "probe_index": probe.index,
        "kind": probe.kind,
        "rate": probe.rate,
        "seed": probe.seed,
        "queries": probe.queries,
        "over_slo": probe.over_slo,
        "verdict": probe.verdict,
        "p99_ms": probe.p99_ms,
        "abort_reason": probe.abort_reason,
        "run_dir": probe.run_dir,
        "flagged": probe.flagged,
        "throughput_qps": probe.throughput_qps,
        "duration_s": probe.duration_s,
        # None: the verdict used the raw counts (stages.capacity.clustering)
        "design_effect": probe.design_effect,
        "pipelines": json.dumps(pipelines, sort_keys=True),
        # capacity II: an older record's window is NULL, cannot_pass false
        "window_s": probe.window_s,
        "cannot_pass": probe.cannot_pass,
    }


def _direction(ray: RayResult, pipelines: tuple[str, str]) -> tuple[float, float]:
    """(cos, sin) of the ray's angle: its `direction`, else computed from angle_deg; rounded to
    12 decimals, so cos 90 degrees is 0 and not 6e-17."""
    if all(name in ray.direction for name in pipelines):
        pair = ray.direction[pipelines[0]], ray.direction[pipelines[1]]
    else:
        angle = math.radians(ray.angle_deg)
        pair = math.cos(angle), math.sin(angle)
    return round(pair[0], 12), round(pair[1], 12)


def ray_row(files: RegionFiles, ray: RayResult) -> dict[str, Any]:
    """The capacity_region_rays row of one ray (insert_region_ray.sql's parameters)."""
    first, second = files.pipelines()
    direction_a, direction_b = _direction(ray, (first, second))
    ci_low, ci_high = _pair(ray.estimate_ci95_s)
    bracket_lo, bracket_hi = _pair(ray.bracket_s)
    return {
        "region_id": files.region_id,
        "ray_index": ray.index,
        "angle_deg": ray.angle_deg,
        "pipeline_a": first,
        "pipeline_b": second,
        "direction_a": direction_a,
        "direction_b": direction_b,
        "solo_capacity_a_qps": files.solo_capacity(ray, first),
        "solo_capacity_b_qps": files.solo_capacity(ray, second),
        "certified_s": ray.certified_s,
        "estimate_s": ray.estimate_s,
        "estimate_ci95_low_s": ci_low,
        "estimate_ci95_high_s": ci_high,
        "bracket_lo_s": bracket_lo,
        "bracket_hi_s": bracket_hi,
        "stop_reason": ray.stop_reason,
        "probes": ray.probes,
        "flagged_probes": ray.flagged_probes,
        "monotonicity_violations": ray.monotonicity_violations,
        "search_id": ray.search_id,
        "region_dir": str(files.region_dir.resolve()),
    }

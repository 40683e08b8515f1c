"""The capacity region of two pipelines as records (`RegionResult`, region.json) and its
geometry: ray k of n points at t_k = 90 k / (n + 1) degrees, offers pipeline A s cos t C_A and
B s sin t C_B, so on axes normalised by the solo capacities its boundary point is
(s cos t, s sin t), and pure time-sharing is the line x + y = 1."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from stages.capacity.contract import CapacityResult, StopReason

ScalingSource = Literal["certified", "estimate"]
"""Which solo capacity the rays scale by: the certified one (conservative), else the estimate."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SoloCapacity(_Record):
    """One pipeline alone: the solo search's answer and the capacity the rays scale by."""

    pipeline: str
    search_id: str = Field(description="The solo search; its folder is <out>/<search_id>.")
    slo_ms: float
    certified_qps: float | None
    estimate_qps: float | None
    estimate_ci95: tuple[float, float] | None
    stop_reason: StopReason
    scaling_qps: float | None = Field(
        description="C: the capacity the rays scale this pipeline's rate by (None: neither a "
        "certified capacity nor an estimate, so the region cannot be searched)."
    )
    scaling_source: ScalingSource | None = Field(
        description="certified, or estimate when nothing was certified."
    )


class RayResult(_Record):
    """One ray's search: the scale s it reached along its direction."""

    index: int = Field(ge=1, description="k = 1..rays, from the A axis towards the B axis.")
    angle_deg: float = Field(gt=0, lt=90, description="t_k = 90 k / (rays + 1).")
    direction: dict[str, float] = Field(description="A: cos t, B: sin t.")
    solo_capacity_qps: dict[str, float] = Field(description="C_A, C_B this ray scaled by.")
    search_id: str = Field(description="The ray's search; its folder is <out>/<search_id>.")
    certified_s: float | None = Field(
        description="The search's certified scale s (None: none met)."
    )
    estimate_s: float | None
    estimate_ci95_s: tuple[float, float] | None
    bracket_s: tuple[float, float | None]
    stop_reason: StopReason
    probes: int = Field(description="Probes the ray's search ran.")
    monotonicity_violations: int = 0
    flagged_probes: int = 0
    certified_point: dict[str, float] | None = Field(
        description="Each pipeline's offered rate (queries/s) at the certified s."
    )
    normalised: tuple[float, float] | None = Field(
        description="(x, y) = (s cos t, s sin t) at the certified s: rate / solo capacity."
    )
    normalised_estimate: tuple[float, float] | None = Field(
        None, description="(x, y) at the estimated s."
    )


class RegionResult(_Record):
    """region.json: two pipelines' solo capacities and the boundary reached along each ray."""

    region_id: str = Field(description="The region's folder name under --out.")
    spec_source: str | None = None
    spec_hash: str | None = None
    pipelines: tuple[str, str] = Field(description="[A, B]: A is x, B is y.")
    ray_count: int = Field(ge=1, description="Rays asked for (strictly inside the quadrant).")
    percentile: float
    slo_ms: dict[str, float] = Field(description="Each pipeline's own SLO (from the spec).")
    solo: dict[str, SoloCapacity]
    rays: list[RayResult] = Field(description="The rays finished so far, by index.")
    complete: bool = Field(description="Every ray has finished.")
    note: str | None = Field(None, description="Why the region stopped early, if it did.")


def ray_angles_deg(rays: int) -> list[float]:
    """The angles of `rays` rays evenly spaced strictly inside (0, 90) degrees."""
    if rays < 1:
        raise ValueError("a region needs at least one ray")
    return [90.0 * k / (rays + 1) for k in range(1, rays + 1)]


def ray_direction(angle_deg: float, pipelines: tuple[str, str]) -> dict[str, float]:
    """The unit direction of a ray on normalised axes: A cos t, B sin t."""
    radians = math.radians(angle_deg)
    first, second = pipelines
    return {first: math.cos(radians), second: math.sin(radians)}


def ray_search_id(region_id: str, index: int) -> str:
    return f"{region_id}-ray{index}"


def solo_search_id(region_id: str, pipeline: str) -> str:
    return f"{region_id}-{pipeline}"


def solo_capacity(result: CapacityResult, slo_ms: float) -> SoloCapacity:
    """The solo search's summary, scaling by the certified capacity, else the estimate."""
    scaling: float | None = result.certified_qps
    source: ScalingSource | None = "certified" if scaling is not None else None
    if scaling is None and result.estimate_qps is not None:
        scaling, source = result.estimate_qps, "estimate"
    return SoloCapacity(
        pipeline=result.pipeline,
        search_id=result.search_id,
        slo_ms=slo_ms,
        certified_qps=result.certified_qps,
        estimate_qps=result.estimate_qps,
        estimate_ci95=result.estimate_ci95,
        stop_reason=result.stop_reason,
        scaling_qps=scaling,
        scaling_source=source,
    )


def _point(scale: float | None, direction: dict[str, float]) -> tuple[float, float] | None:
    if scale is None:
        return None
    first, second = direction.values()
    return (scale * first, scale * second)


def ray_result(
    index: int,
    rays: int,
    pipelines: tuple[str, str],
    solo_capacity_qps: dict[str, float],
    result: CapacityResult,
) -> RayResult:
    """A finished ray search read on the region's axes."""
    angle = ray_angles_deg(rays)[index - 1]
    direction = ray_direction(angle, pipelines)
    certified = result.certified_qps
    point = None
    if certified is not None:
        point = {name: certified * direction[name] * solo_capacity_qps[name] for name in pipelines}
    return RayResult(
        index=index,
        angle_deg=angle,
        direction=direction,
        solo_capacity_qps=dict(solo_capacity_qps),
        search_id=result.search_id,
        certified_s=certified,
        estimate_s=result.estimate_qps,
        estimate_ci95_s=result.estimate_ci95,
        bracket_s=result.bracket,
        stop_reason=result.stop_reason,
        probes=len(result.probes),
        monotonicity_violations=result.monotonicity_violations,
        flagged_probes=result.flagged_probes,
        certified_point=point,
        normalised=_point(certified, direction),
        normalised_estimate=_point(result.estimate_qps, direction),
    )

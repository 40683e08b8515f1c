"""The capacity region of two pipelines: its records (`RegionResult`, region.json, defined
in stages.contracts.capacity_files) made from the searches, and its geometry: ray k of n points
at t_k = 90 k / (n + 1) degrees, offers pipeline A s cos t C_A and B s sin t C_B, so on axes
normalised by the solo capacities its boundary point is (s cos t, s sin t), and pure
time-sharing is the line x + y = 1."""

from __future__ import annotations

import math

from stages.contracts.capacity_files import (
    CapacityResult,
    RayResult,
    ScalingSource,
    SoloCapacity,
)


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

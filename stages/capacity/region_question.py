"""What a capacity region is asked, checked against the spec (`region_asked`: the two
pipelines, the rays, the region's id, and for a single ray its solo capacities), and its
answer (`answer_region`: the whole region, or that one ray, as Dagster runs it). Bad input is a
`RegionInputError`, one line (the CLI exits 2)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from stages.capacity.region import (
    OptionsT,
    RegionInputError,
    RunSearch,
    region_pipelines,
    run_ray,
    run_region,
)
from stages.contracts.capacity_files import RayResult, RegionResult, SearchSettings
from stages.validation.loading import LoadedSpec


@dataclass(frozen=True)
class RegionAsked:
    """A region (or one ray of it) as asked, checked: `ray` None is the whole region."""

    pipelines: tuple[str, str]
    rays: int
    region_id: str
    ray: int | None = None
    solo_capacity_qps: dict[str, float] | None = None


def default_region_id(loaded: LoadedSpec, pipelines: tuple[str, str]) -> str:
    """`<spec>-<A>-<B>-<UTC time>`: a new folder under --out for every region started."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return f"{loaded.spec.name}-{pipelines[0]}-{pipelines[1]}-{stamp}"


def parse_solo(text: str, pipelines: tuple[str, str]) -> dict[str, float]:
    """`A=QPS,B=QPS` -> {A: QPS, B: QPS}, both pipelines of the region, each capacity > 0."""
    capacities: dict[str, float] = {}
    for item in text.split(","):
        name, separator, value = item.partition("=")
        try:
            rate = float(value)
        except ValueError:
            rate = float("nan")
        if not separator or not rate > 0 or name.strip() not in pipelines:
            raise RegionInputError(
                f"--solo {text!r}: give {pipelines[0]}=QPS,{pipelines[1]}=QPS with rates > 0"
            )
        capacities[name.strip()] = rate
    if set(capacities) != set(pipelines):
        raise RegionInputError(
            f"--solo {text!r}: give a capacity for both {' and '.join(pipelines)}"
        )
    return capacities


def region_asked(
    loaded: LoadedSpec,
    region: str,
    rays: int,
    region_id: str | None = None,
    ray: int | None = None,
    solo: str | None = None,
) -> RegionAsked:
    """`--region A,B --rays N [--search-id ID]`, or one ray `--ray K --solo A=QPS,B=QPS`
    (which needs the region's id): checked, a new region given a new id."""
    pipelines = region_pipelines(loaded, region.split(","))
    if rays < 1:
        raise RegionInputError(f"--rays must be at least 1, got {rays}")
    if ray is not None:
        if solo is None:
            raise RegionInputError(
                "--ray needs --solo A=QPS,B=QPS (the solo capacities to scale by)"
            )
        if region_id is None:
            raise RegionInputError("--ray needs --search-id (the region's id, shared by its rays)")
        return RegionAsked(pipelines, rays, region_id, ray, parse_solo(solo, pipelines))
    if solo is not None:
        raise RegionInputError("--solo goes with --ray (one ray of a region)")
    return RegionAsked(pipelines, rays, region_id or default_region_id(loaded, pipelines))


def answer_region(
    loaded: LoadedSpec,
    asked: RegionAsked,
    *,
    options: OptionsT,
    settings_template: SearchSettings,
    run_search: RunSearch[OptionsT],
) -> RegionResult | RayResult:
    """The region's searches (solo, then one per ray), or only the asked ray's."""
    if asked.ray is not None and asked.solo_capacity_qps is not None:
        return run_ray(
            loaded,
            asked.pipelines,
            asked.ray,
            asked.rays,
            asked.solo_capacity_qps,
            options,
            settings_template,
            region_id=asked.region_id,
            run_search=run_search,
        )
    return run_region(
        loaded,
        asked.pipelines,
        asked.rays,
        options,
        settings_template,
        region_id=asked.region_id,
        run_search=run_search,
    )

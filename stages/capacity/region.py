"""Search the capacity region of two pipelines A and B: each one's solo capacity C_A, C_B, then
one search per ray of offered rates (s cos t C_A, s sin t C_B), the scale s decided by both
pipelines' verdicts. region.json is rewritten (atomically) after every search, and each search
resumes from its own folder, so a killed region loses at most the probe in flight."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from stages.capacity.region_model import (
    ray_angles_deg,
    ray_direction,
    ray_result,
    ray_search_id,
    solo_capacity,
    solo_search_id,
)
from stages.capacity.region_store import read_capacity, read_region, write_region
from stages.contracts.capacity_files import (
    SEARCH_FILE,
    CapacityResult,
    RayResult,
    RegionResult,
    SearchSettings,
    SoloCapacity,
)
from stages.contracts.errors import InvalidInputError
from stages.validation.loading import LoadedSpec

OPEN_LOOP_TYPES = ("server", "constant")
"""Load generators whose `rate` a search scales (capacity is an open-loop question)."""

_COMPARED_SETTINGS = (
    "pipeline",
    "slo_ms",
    "percentile",
    "precision",
    "max_probes",
    "probe_s",
    "with_rates",
    "ray",
    "ray_slo_ms",
)
"""What must match for an existing search folder to be this search resumed."""


class RegionInputError(InvalidInputError, ValueError):
    """A region asked for with bad input: one line naming the problem (the CLI exits 2)."""


class SearchOptions(Protocol):
    """What the region needs of the single search's options (search_runner.SearchRunOptions)."""

    @property
    def out_dir(self) -> Path: ...

    @property
    def progress(self) -> Callable[[str], None] | None: ...


OptionsT = TypeVar("OptionsT", bound=SearchOptions)
RunSearch = Callable[[LoadedSpec, SearchSettings, OptionsT], CapacityResult]
"""search_runner.run_capacity_search, or a simulated one in tests."""


def region_pipelines(loaded: LoadedSpec, names: Sequence[str]) -> tuple[str, str]:
    """The two pipelines of a region, checked: two distinct open-loop pipelines of the spec."""
    cleaned = [name.strip() for name in names]
    if len(cleaned) != 2 or not all(cleaned):
        raise RegionInputError(f"--region needs exactly two pipeline names A,B, got {names!r}")
    if cleaned[0] == cleaned[1]:
        raise RegionInputError(f"--region names {cleaned[0]!r} twice: give two pipelines")
    by_name = {pipeline.name: pipeline for pipeline in loaded.spec.pipelines}
    for name in cleaned:
        if name not in by_name:
            known = ", ".join(sorted(by_name))
            raise RegionInputError(f"--region: no pipeline {name!r} in the spec (it has {known})")
        loadgen_type = by_name[name].loadgen.type
        if loadgen_type not in OPEN_LOOP_TYPES:
            raise RegionInputError(
                f"--region: pipeline {name!r} is {loadgen_type}; capacity is an open-loop "
                f"question (loadgen type {' or '.join(OPEN_LOOP_TYPES)})"
            )
    return cleaned[0], cleaned[1]


def region_slos(loaded: LoadedSpec, pipelines: tuple[str, str]) -> dict[str, float]:
    """Each pipeline's own slo_ms from the spec; a region pipeline without one is bad input."""
    slos: dict[str, float] = {}
    for pipeline in loaded.spec.pipelines:
        if pipeline.name in pipelines:
            if pipeline.loadgen.slo_ms is None:
                raise RegionInputError(
                    f"--region: pipeline {pipeline.name!r} has no loadgen.slo_ms in the spec "
                    "(a region decides every ray by each pipeline's own SLO)"
                )
            slos[pipeline.name] = pipeline.loadgen.slo_ms
    return {name: slos[name] for name in pipelines}


def _from_template(
    template: SearchSettings, loaded: LoadedSpec, **update: object
) -> SearchSettings:
    """The template's knobs (percentile, precision, probes, seed) with this search's identity."""
    update.setdefault("spec_source", template.spec_source or loaded.source)
    update.setdefault("spec_hash", template.spec_hash or loaded.spec_hash)
    data = template.model_dump() | update
    return SearchSettings.model_validate(data)


def solo_settings(
    template: SearchSettings, loaded: LoadedSpec, region_id: str, pipeline: str, slo_ms: float
) -> SearchSettings:
    """One pipeline alone (no co-runner) against its own SLO."""
    return _from_template(
        template,
        loaded,
        search_id=solo_search_id(region_id, pipeline),
        pipeline=pipeline,
        slo_ms=slo_ms,
        with_rates={},
        ray=None,
        ray_slo_ms=None,
    )


def ray_settings(
    template: SearchSettings,
    loaded: LoadedSpec,
    region_id: str,
    pipelines: tuple[str, str],
    slos: dict[str, float],
    index: int,
    rays: int,
    solo_capacity_qps: dict[str, float],
) -> SearchSettings:
    """Ray `index` of `rays`: pipeline i runs at s * direction_i * C_i; the searched rate is s."""
    if not 1 <= index <= rays:
        raise RegionInputError(f"--ray {index} is not one of the rays 1..{rays}")
    direction = ray_direction(ray_angles_deg(rays)[index - 1], pipelines)
    ray = {name: direction[name] * solo_capacity_qps[name] for name in pipelines}
    return _from_template(
        template,
        loaded,
        search_id=ray_search_id(region_id, index),
        pipeline="+".join(pipelines),
        slo_ms=min(slos.values()),
        with_rates={},
        min_rate=None,  # the time budget decides how low a ray goes (probe_plan)
        ray=ray,
        ray_slo_ms=dict(slos),
    )


def finished_result(out_dir: Path, settings: SearchSettings) -> CapacityResult | None:
    """The search's capacity.json if it already finished; an existing folder holding a
    different search is bad input (a region id reused with other settings)."""
    folder = out_dir / settings.search_id
    if (folder / SEARCH_FILE).is_file():
        stored = SearchSettings.model_validate_json((folder / SEARCH_FILE).read_text())
        fields = set(_COMPARED_SETTINGS)
        if stored.model_dump(include=fields) != settings.model_dump(include=fields):
            raise RegionInputError(
                f"{folder} holds a search with other settings: give another --search-id"
            )
    return read_capacity(folder)


def _search(
    loaded: LoadedSpec,
    settings: SearchSettings,
    options: OptionsT,
    run_search: RunSearch[OptionsT],
) -> CapacityResult:
    """A finished search is read back; anything else runs (and resumes its own probes)."""
    done = finished_result(options.out_dir, settings)
    if done is not None:
        _say(options, f"{settings.search_id}: finished earlier, read back")
        return done
    _say(options, f"{settings.search_id}: searching {settings.pipeline}")
    return run_search(loaded, settings, options)


def _say(options: SearchOptions, message: str) -> None:
    if options.progress is not None:
        options.progress(message)


def run_ray(
    loaded: LoadedSpec,
    pipelines: tuple[str, str],
    ray_index: int,
    rays: int,
    solo_capacity_qps: dict[str, float],
    options: OptionsT,
    settings_template: SearchSettings,
    *,
    region_id: str,
    run_search: RunSearch[OptionsT],
) -> RayResult:
    """One ray given the solo capacities (Dagster runs each ray as its own run)."""
    pipelines = region_pipelines(loaded, pipelines)
    slos = region_slos(loaded, pipelines)
    for name in pipelines:
        capacity = solo_capacity_qps.get(name)
        if capacity is None or not capacity > 0:
            raise RegionInputError(f"--solo needs a positive capacity for {name!r}")
    settings = ray_settings(
        settings_template, loaded, region_id, pipelines, slos, ray_index, rays, solo_capacity_qps
    )
    result = _search(loaded, settings, options, run_search)
    return ray_result(ray_index, rays, pipelines, solo_capacity_qps, result)


def run_region(
    loaded: LoadedSpec,
    pipelines: tuple[str, str],
    rays: int,
    options: OptionsT,
    settings_template: SearchSettings,
    *,
    region_id: str,
    run_search: RunSearch[OptionsT],
) -> RegionResult:
    """Both solo searches, then every ray in order, region.json rewritten after each."""
    pipelines = region_pipelines(loaded, pipelines)
    slos = region_slos(loaded, pipelines)
    if rays < 1:
        raise RegionInputError(f"--rays must be at least 1, got {rays}")
    region_dir = options.out_dir / region_id
    _check_same_region(region_dir, pipelines, rays)
    solo = {
        name: solo_capacity(
            _search(
                loaded,
                solo_settings(settings_template, loaded, region_id, name, slos[name]),
                options,
                run_search,
            ),
            slos[name],
        )
        for name in pipelines
    }
    region = _region(loaded, region_id, pipelines, rays, settings_template.percentile, solo, [])
    write_region(region_dir, region)
    if region.note is not None:
        return region
    capacities = {name: _scaling(solo[name]) for name in pipelines}
    for index in range(1, rays + 1):
        finished = run_ray(
            loaded,
            pipelines,
            index,
            rays,
            capacities,
            options,
            settings_template,
            region_id=region_id,
            run_search=run_search,
        )
        region = region.model_copy(
            update={"rays": [*region.rays, finished], "complete": index == rays}
        )
        write_region(region_dir, region)
    return region


def region_from_searches(
    loaded: LoadedSpec,
    pipelines: tuple[str, str],
    rays: int,
    out_dir: Path,
    region_id: str,
    percentile: float,
    solo_search_ids: dict[str, str] | None = None,
) -> RegionResult:
    """The region as far as its searches under `out_dir` have finished (for Dagster, whose
    solo searches and rays ran as separate runs): solo searches by `solo_search_ids` (default
    `<region_id>-<pipeline>`), rays `<region_id>-ray<k>`. Unfinished rays are left out."""
    pipelines = region_pipelines(loaded, pipelines)
    slos = region_slos(loaded, pipelines)
    ids = solo_search_ids or {name: solo_search_id(region_id, name) for name in pipelines}
    solo: dict[str, SoloCapacity] = {}
    for name in pipelines:
        result = read_capacity(out_dir / ids[name])
        if result is None:
            raise RegionInputError(
                f"{out_dir / ids[name]}: the solo search of {name!r} has not finished"
            )
        solo[name] = solo_capacity(result, slos[name])
    finished: list[RayResult] = []
    if _no_scaling_note(solo) is None:
        capacities = {name: _scaling(solo[name]) for name in pipelines}
        for index in range(1, rays + 1):
            result = read_capacity(out_dir / ray_search_id(region_id, index))
            if result is not None:
                finished.append(ray_result(index, rays, pipelines, capacities, result))
    return _region(loaded, region_id, pipelines, rays, percentile, solo, finished)


def _region(
    loaded: LoadedSpec,
    region_id: str,
    pipelines: tuple[str, str],
    rays: int,
    percentile: float,
    solo: dict[str, SoloCapacity],
    finished: list[RayResult],
) -> RegionResult:
    return RegionResult(
        region_id=region_id,
        spec_source=loaded.source,
        spec_hash=loaded.spec_hash,
        pipelines=pipelines,
        ray_count=rays,
        percentile=percentile,
        slo_ms=region_slos(loaded, pipelines),
        solo=solo,
        rays=finished,
        complete=len(finished) == rays,
        note=_no_scaling_note(solo),
    )


def _scaling(solo: SoloCapacity) -> float:
    if solo.scaling_qps is None:
        raise ValueError(f"{solo.pipeline} has no capacity to scale by")
    return solo.scaling_qps


def _no_scaling_note(solo: dict[str, SoloCapacity]) -> str | None:
    """Why no ray can run: a pipeline alone has neither a certified capacity nor an estimate."""
    empty = [item for item in solo.values() if item.scaling_qps is None]
    if not empty:
        return None
    return "; ".join(
        f"{item.pipeline} alone has no capacity (stop_reason {item.stop_reason}): no ray searched"
        for item in empty
    )


def _check_same_region(region_dir: Path, pipelines: tuple[str, str], rays: int) -> None:
    existing = read_region(region_dir)
    if existing is not None and (existing.pipelines, existing.ray_count) != (pipelines, rays):
        raise RegionInputError(
            f"{region_dir} holds the region {','.join(existing.pipelines)} with "
            f"{existing.ray_count} rays: resume it with those, or give another --search-id"
        )

"""The spec of one probe: the searched spec cut down to the target and its co-runners (or a
ray's pipelines), the target at the probe's rate, each co-runner at its fixed rate, one trial,
one phase, the probe's seed and window, each searched pipeline's loadgen at the SLO its verdict
is judged by (`judged_slo_ms`). The result is validated like any spec file, so a probe is an
ordinary run; the changes it made are recorded as the manifest's `overrides`."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from stages.capacity.controller import ProbeRequest
from stages.capacity.probe_plan import CEILING_PROBE_MAX_S
from stages.capacity.search_services import SharedService, as_external
from stages.contracts.capacity_files import SearchSettings
from stages.contracts.errors import InvalidInputError
from stages.validation.loading import LoadedSpec, validate_document

OPEN_LOOP_TYPES = ("server", "constant")
"""The load generators a searched (or co-running) pipeline may have: an offered rate."""
CEILING_CONCURRENCY = 4
"""Closed-loop clients of the ceiling probe (more for a longer pipeline, at most the queue)."""
EXTENSION_ALLOWANCE = 0.25
"""timeout_s allows the window this much longer: the loadgen's min_queries extends a window
whose Poisson count fell short of the probe's minimum."""
DRAIN_ALLOWANCE_S = 10.0
"""timeout_s past warm-up plus window: in-flight queries then are recorded as timeouts."""


class ProbeSpecError(InvalidInputError, ValueError):
    """The search cannot run on this spec (one line saying why)."""


def pipelines_of(settings: SearchSettings) -> dict[str, float | None]:
    """Every pipeline a probe runs, by name: the offered rate per unit of the probe's rate for
    the searched ones (1 for a single target; the ray's components), None for co-runners."""
    if settings.ray is not None:
        return {name: scale for name, scale in settings.ray.items()}
    return {settings.pipeline: 1.0, **{name: None for name in settings.with_rates}}


def judged_slo_ms(name: str, settings: SearchSettings) -> float | None:
    """The SLO pipeline `name`'s verdict in this search is judged against, so the one its
    probes count live by too: a ray's pipeline its own (`ray_slo_ms`), a searched one the
    search's (--slo-ms or the spec's); None for a co-runner (it keeps its spec's)."""
    if settings.ray_slo_ms and name in settings.ray_slo_ms:
        return settings.ray_slo_ms[name]
    return settings.slo_ms if pipelines_of(settings).get(name) is not None else None


def check_searchable(loaded: LoadedSpec, settings: SearchSettings) -> None:
    """Refuse a search this spec cannot answer: an unknown pipeline, a target or co-runner
    without an offered rate (closed loop, single/multi stream, offline, trace)."""
    known = [pipeline.name for pipeline in loaded.spec.pipelines]
    by_name = {pipeline.name: pipeline for pipeline in loaded.spec.pipelines}
    for name, scale in pipelines_of(settings).items():
        if name not in by_name:
            raise ProbeSpecError(f"unknown pipeline {name!r} (known: {', '.join(known)})")
        loadgen_type = by_name[name].loadgen.type
        if loadgen_type in OPEN_LOOP_TYPES:
            continue
        if scale is not None:
            raise ProbeSpecError(
                f"{name} has a {loadgen_type} loadgen: capacity is an open-loop question: "
                f"give {name} a server or constant loadgen"
            )
        raise ProbeSpecError(
            f"--with {name}: a co-runner runs at a fixed rate: give {name} a server or "
            f"constant loadgen (it has {loadgen_type})"
        )


def probe_spec(
    loaded: LoadedSpec,
    request: ProbeRequest,
    settings: SearchSettings,
    shared: Mapping[str, SharedService] | None = None,
) -> LoadedSpec:
    """The validated spec of one probe (raises ProbeSpecError when the search cannot run);
    `shared`: the services up for the whole search, named as `external` ones."""
    check_searchable(loaded, settings)
    document = copy.deepcopy(loaded.normalized)
    rates = pipelines_of(settings)
    overrides = [f"seed={request.seed}", "repeats=1", "collocation.solo_baselines=false"]
    document.update(seed=request.seed, repeats=1)
    document["collocation"] = {**document["collocation"], "solo_baselines": False}
    document["collocation"].pop("subsets", None)
    telemetry = document.setdefault("telemetry", {})
    if telemetry.get("idle_baseline_s"):
        telemetry["idle_baseline_s"] = 0.0
        overrides.append("telemetry.idle_baseline_s=0")
    # A probe is judged on its own queries, never against a history of runs: the machine-speed
    # calibration (0.25 s a phase boundary) would only lengthen the search.
    telemetry["calibration"] = {**telemetry.get("calibration", {}), "enabled": False}
    overrides.append("telemetry.calibration.enabled=false")
    if shared and document.get("services"):
        document["services"], named = as_external(document["services"], shared)
        overrides += named
    document["pipelines"] = [p for p in document["pipelines"] if p["name"] in rates]
    for pipeline in document["pipelines"]:
        name = pipeline["name"]
        scale = rates[name]
        window = probe_window_s(request, settings)
        minimum = request.min_queries if scale is not None else 0
        if request.kind == "unloaded" and scale is not None:
            pipeline["loadgen"] = _unloaded(pipeline, settings.probe_s, window, minimum)
        elif request.kind == "ceiling" and scale is not None:
            pipeline["loadgen"] = _closed_loop(pipeline, window, minimum, None)
        else:
            rate = request.rate * scale if scale is not None else settings.with_rates[name]
            pipeline["loadgen"] = _open_loop(pipeline["loadgen"], rate, window, minimum)
        overrides += [f"pipelines.{name}.loadgen.{k}={v}" for k, v in _shown(pipeline).items()]
        if (slo_ms := judged_slo_ms(name, settings)) is not None:
            pipeline["loadgen"]["slo_ms"] = slo_ms  # the live over-SLO count's, as the verdict's
            overrides.append(f"pipelines.{name}.loadgen.slo_ms={slo_ms}")
    probe = validate_document(document, loaded.source)
    return dataclasses.replace(probe, overrides=tuple(overrides))


def probe_window_s(request: ProbeRequest, settings: SearchSettings) -> float:
    """The measured window of a probe: the one the controller planned (sized by rate:
    stages.capacity.probe_plan), else probe_s (at most CEILING_PROBE_MAX_S for the ceiling)."""
    if request.window_s is not None:
        return request.window_s
    if request.kind == "ceiling":
        return min(settings.probe_s, CEILING_PROBE_MAX_S)
    return settings.probe_s


def _open_loop(
    loadgen: dict[str, Any], rate_qps: float, window_s: float, min_queries: int
) -> dict[str, Any]:
    """The open-loop loadgen at `rate_qps` for `window_s` and at least `min_queries` measured
    queries (LoadGen's rule: both), its timeout grown to cover them; no max_queries (it would
    change the planned size)."""
    changed = {**loadgen, "rate": rate_qps, "duration_s": window_s}
    changed.update(min_queries=min_queries, max_queries=None)
    changed["timeout_s"] = max(float(loadgen["timeout_s"]), _timeout_s(changed))
    return changed


def _closed_loop(
    pipeline: dict[str, Any], window_s: float, min_queries: int, clients: int | None
) -> dict[str, Any]:
    """A closed loop with no think time for `window_s` and at least `min_queries` measured
    queries: the ceiling probe's with enough clients to fill the pipeline (CEILING_CONCURRENCY,
    or one per stage when longer, or as many as its widest stage serves at once; at most its
    queue depth), the unloaded probe's with one (`clients`)."""
    loadgen = pipeline["loadgen"]
    wanted = max(CEILING_CONCURRENCY, len(pipeline["stages"]), widest_stage(pipeline))
    concurrency = clients or min(int(loadgen["queue_depth"]), wanted)
    kept = (
        "samples_per_query",
        "warmup_queries",
        "warmup_s",
        "queue_depth",
        "on_full",
        "slo_ms",
    )
    changed: dict[str, Any] = {key: loadgen[key] for key in kept if key in loadgen}
    changed.update(
        type="closed_loop",
        concurrency=concurrency,
        think_time_ms=0.0,
        duration_s=window_s,
        min_queries=min_queries,
    )
    changed["timeout_s"] = max(float(loadgen["timeout_s"]), _timeout_s(changed))
    return changed


def _unloaded(
    pipeline: dict[str, Any], probe_s: float, longest_s: float, min_queries: int
) -> dict[str, Any]:
    """The unloaded probe's loadgen: one query at a time for at least `probe_s` and
    `min_queries` measured queries, stopped at `longest_s` past its warm-up (its timeout) when
    the pipeline is too slow for them."""
    changed = _closed_loop(pipeline, min(probe_s, longest_s), min_queries, clients=1)
    changed["timeout_s"] = math.ceil(_needed_s({**changed, "duration_s": longest_s}))
    return changed


def widest_stage(pipeline: dict[str, Any]) -> int:
    """Visits the pipeline's widest stage runs at once: its `concurrency` threads times, for an
    asynchronous stage type, its `max_in_flight` (a served model's client keeps that many
    requests at the server, whose batching is what the ceiling must fill)."""
    from stages.runtime.registry import default_registry

    registry = default_registry()
    widest = 1
    for stage in pipeline["stages"]:
        config = registry.get(stage["type"]).config_model.model_validate(stage.get("config", {}))
        in_flight = int(getattr(config, "max_in_flight", 1))
        widest = max(widest, int(stage.get("concurrency", 1)) * in_flight)
    return widest


def _timeout_s(loadgen: dict[str, Any]) -> float:
    """Warm-up plus window, with room for min_queries to extend the window, plus the drain."""
    return math.ceil(_needed_s(loadgen) * (1 + EXTENSION_ALLOWANCE) + DRAIN_ALLOWANCE_S)


def _needed_s(loadgen: dict[str, Any]) -> float:
    """Warm-up plus window, as the loadgen model's own timeout check counts them."""
    needed = float(loadgen.get("duration_s", 0.0)) + float(loadgen.get("warmup_s", 0.0))
    rate = loadgen.get("rate")
    if rate and loadgen.get("warmup_queries"):
        needed += loadgen["warmup_queries"] / rate
    return math.ceil(needed)


def _shown(pipeline: dict[str, Any]) -> dict[str, Any]:
    """The loadgen fields a probe sets, for the manifest's `overrides`."""
    loadgen = pipeline["loadgen"]
    names = (
        "type",
        "rate",
        "concurrency",
        "think_time_ms",
        "duration_s",
        "timeout_s",
        "min_queries",
        "max_queries",
    )
    return {name: loadgen[name] for name in names if name in loadgen}

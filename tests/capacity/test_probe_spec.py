"""A probe's spec is an ordinary validated spec: the target (at the probe's rate) and its
co-runners (at theirs) only, one trial, one phase, the probe's seed and window; the ceiling
probe runs the target closed loop; a target without an offered rate is refused."""

from __future__ import annotations

from typing import Any

import pytest

from stages.capacity.controller import ProbeRequest
from stages.capacity.probe_spec import ProbeSpecError, check_searchable, probe_spec
from stages.collocation.phase_plan import phases_of
from stages.contracts.capacity_files import SearchSettings
from stages.validation.loading import LoadedSpec, validate_document


def spec(**target_loadgen: Any) -> LoadedSpec:
    loadgen = {"type": "server", "rate": 50, "slo_ms": 50, "duration_s": 30, "warmup_s": 2}
    loadgen |= {"min_queries": 5000, "max_queries": 9000}
    loadgen.update(target_loadgen)
    return validate_document(
        {
            "name": "demo",
            "seed": 7,
            "repeats": 3,
            "collocation": {"subsets": "pairs"},
            "telemetry": {"idle_baseline_s": 5},
            "pipelines": [
                {"name": "target", "loadgen": loadgen, "stages": [{"id": "s", "type": "sleep"}]},
                {
                    "name": "busy",
                    "loadgen": {"type": "constant", "rate": 3, "duration_s": 30},
                    "stages": [{"id": "b", "type": "noop"}],
                },
                {"name": "other", "stages": [{"id": "o", "type": "noop"}]},
            ],
        }
    )


def settings(**extra: Any) -> SearchSettings:
    fields: dict[str, Any] = {
        "search_id": "s",
        "pipeline": "target",
        "slo_ms": 50,
        "probe_s": 12,
        "min_rate": 1,
    }
    fields.update(extra)
    return SearchSettings.model_validate(fields)


def test_a_search_probe_runs_the_target_alone_at_its_rate() -> None:
    probe = probe_spec(spec(), ProbeRequest("search", 123.5, 9, False), settings())
    (target,) = probe.spec.pipelines
    assert target.name == "target" and target.loadgen.type == "server"
    assert target.loadgen.rate == 123.5
    assert target.loadgen.duration_s == 12
    assert target.loadgen.warmup_s == 2  # kept as the spec has it
    assert target.loadgen.timeout_s >= 12 + 2
    # The window alone ends a probe: its planned size is rate x probe_s.
    assert (target.loadgen.min_queries, target.loadgen.max_queries) == (0, None)
    assert (probe.spec.seed, probe.spec.repeats) == (9, 1)
    assert probe.spec.telemetry.idle_baseline_s == 0
    assert [(trial, phase) for trial, phase, _ in phases_of(probe.spec)] == [(0, "solo")]
    assert "pipelines.target.loadgen.rate=123.5" in probe.overrides
    assert "seed=9" in probe.overrides


def test_co_runners_run_at_their_fixed_rates_in_one_collocated_phase() -> None:
    probe = probe_spec(
        spec(), ProbeRequest("search", 40, 0, False), settings(**{"with": {"busy": 2.5}})
    )
    by_name = {p.name: p for p in probe.spec.pipelines}
    assert set(by_name) == {"target", "busy"}  # `other` is not part of the question
    assert by_name["target"].loadgen.rate == 40
    assert by_name["busy"].loadgen.rate == 2.5
    assert by_name["busy"].loadgen.duration_s == 12
    assert [phase for _, phase, _ in phases_of(probe.spec)] == ["collocated"]


def test_the_ceiling_probe_runs_the_target_closed_loop_for_at_most_ten_seconds() -> None:
    probe = probe_spec(spec(), ProbeRequest("ceiling", 0, 0, False), settings())
    (target,) = probe.spec.pipelines
    assert target.loadgen.type == "closed_loop"
    assert target.loadgen.concurrency == 4
    assert target.loadgen.think_time_ms == 0
    assert target.loadgen.duration_s == 10
    assert target.loadgen.slo_ms == 50


def test_a_ray_probe_scales_every_pipeline_of_the_ray() -> None:
    ray = settings(pipeline="target+busy", ray={"target": 100.0, "busy": 10.0})
    probe = probe_spec(spec(), ProbeRequest("search", 0.5, 0, False), ray)
    rates = {p.name: p.loadgen.rate for p in probe.spec.pipelines}
    assert rates == {"target": 50.0, "busy": 5.0}


@pytest.mark.parametrize("kind", ["closed_loop", "single_stream", "multi_stream", "offline"])
def test_a_target_without_an_offered_rate_is_refused(kind: str) -> None:
    loadgen: dict[str, Any] = {"type": kind, "rate": None, "warmup_s": 0}
    if kind in ("multi_stream", "offline"):
        loadgen["samples_per_query"] = 8
    with pytest.raises(ProbeSpecError, match="capacity is an open-loop question: give target"):
        check_searchable(spec(**loadgen), settings())


def test_an_unknown_pipeline_names_the_known_ones() -> None:
    with pytest.raises(ProbeSpecError, match=r"unknown pipeline 'nope' \(known: target, busy"):
        check_searchable(spec(), settings(pipeline="nope"))


def test_services_up_for_the_search_are_external_in_every_probe() -> None:
    from stages.capacity.search_services import SharedService

    document = spec().normalized
    document["services"] = [
        {"name": "llm", "type": "transformers.serve", "model": {"artifact": "tiny_lm"}},
        {"name": "theirs", "type": "external", "url": "http://127.0.0.1:9/"},
    ]
    loaded = validate_document(document)
    shared = {"llm": SharedService("http://127.0.0.1:4321", "/health")}
    probe = probe_spec(loaded, ProbeRequest("search", 10, 1, False), settings(), shared)
    llm, theirs = probe.spec.services
    assert (llm.type, llm.url, llm.ready.path) == ("external", "http://127.0.0.1:4321", "/health")
    assert llm.warmup_requests == 0 and llm.model is None
    assert theirs.url == "http://127.0.0.1:9/"  # the user's own: untouched
    assert "services.llm.url=http://127.0.0.1:4321" in probe.overrides
    # Without shared services (a spec the search does not start), the probe starts its own.
    alone = probe_spec(loaded, ProbeRequest("search", 10, 1, False), settings())
    assert alone.spec.services[0].type == "transformers.serve"


def test_the_ceiling_fills_an_asynchronous_stage() -> None:
    document = spec().normalized
    document["pipelines"][0]["stages"] = [
        {"id": "a", "type": "async_sleep", "concurrency": 2, "config": {"max_in_flight": 12}},
    ]
    probe = probe_spec(
        validate_document(document), ProbeRequest("ceiling", 0, 0, False), settings()
    )
    assert probe.spec.pipelines[0].loadgen.concurrency == 24  # 2 threads x 12 in flight
    document["pipelines"][0]["stages"] = [{"id": "a", "type": "async_sleep"}]
    probe = probe_spec(
        validate_document(document), ProbeRequest("ceiling", 0, 0, False), settings()
    )
    assert probe.spec.pipelines[0].loadgen.concurrency == 64  # the default max_in_flight

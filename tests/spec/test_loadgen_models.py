"""The loadgen union: required fields per type, the offline sample count's one meaning, and
a normal form equal to the flat model's (spec hashes unchanged)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stages.spec.loadgen import OfflineLoadgen, ServerLoadgen, SingleStreamLoadgen, loadgen_spec
from stages.validation.loading import LoadedSpec, SpecError, validate_document

FLAT_FIELDS = {
    "type", "rate", "burstiness", "concurrency", "think_time_ms", "samples_per_query", "trace",
    "duration_s", "min_queries", "max_queries", "warmup_queries", "warmup_s", "queue_depth",
    "on_full", "timeout_s", "slo_ms",
}  # fmt: skip


def pipeline_loadgen_problems(loadgen: object) -> list[str]:
    """The problem lines of a one-pipeline spec with this `loadgen` block."""
    document = {"name": "b", "pipelines": [{"name": "p", "loadgen": loadgen, "stages": [
        {"id": "s", "type": "noop"}]}]}  # fmt: skip
    try:
        validate_document(document)
    except SpecError as error:
        return [str(problem) for problem in error.problems]
    return []


@pytest.mark.parametrize(
    "fields",
    [
        {"type": "server", "rate": 5},
        {"type": "offline", "samples_per_query": 10},
        {"type": "closed_loop", "concurrency": 2},
        {"type": "trace", "trace": "a.csv"},
    ],
)
def test_every_type_dumps_the_flat_fields(fields: dict[str, object]) -> None:
    assert set(loadgen_spec(**fields).model_dump(mode="json")) == FLAT_FIELDS


def test_type_defaults_to_single_stream_and_poisson_is_server() -> None:
    assert isinstance(loadgen_spec(), SingleStreamLoadgen)
    server = loadgen_spec(type="poisson", rate=3)
    assert isinstance(server, ServerLoadgen)
    assert server.type == "server"


def test_offline_total_samples_is_written_samples_per_query() -> None:
    offline = loadgen_spec(type="offline", samples_per_query=7)
    assert isinstance(offline, OfflineLoadgen)
    assert offline.total_samples == 7
    assert offline.model_dump()["samples_per_query"] == 7


def test_required_fields_are_required_at_their_own_path() -> None:
    with pytest.raises(ValidationError):
        loadgen_spec(type="server")
    problems = pipeline_loadgen_problems({"type": "trace"})
    assert problems == ["pipelines[0].loadgen.trace: required key is missing"]


def test_unknown_type_is_reported_at_type() -> None:
    (problem,) = pipeline_loadgen_problems({"type": "servr"})
    assert problem.startswith("pipelines[0].loadgen.type: Input should be 'offline',")
    assert problem.endswith("got 'servr'")


def test_token_slos_are_dumped_only_when_set_so_older_hashes_stay() -> None:
    def loaded(**loadgen: object) -> LoadedSpec:
        pipeline = {"name": "p", "loadgen": {"type": "server", "rate": 5, **loadgen},
                    "stages": [{"id": "s", "type": "noop"}]}  # fmt: skip
        return validate_document({"name": "b", "pipelines": [pipeline]})

    plain = loaded()
    assert loaded(ttft_slo_ms=None, tpot_slo_ms=None).spec_hash == plain.spec_hash
    with_slos = loaded(ttft_slo_ms=200, tpot_slo_ms=25)
    dumped = with_slos.normalized["pipelines"][0]["loadgen"]
    assert (dumped["ttft_slo_ms"], dumped["tpot_slo_ms"]) == (200, 25)
    assert with_slos.spec_hash != plain.spec_hash
    only_ttft = loaded(ttft_slo_ms=200).normalized["pipelines"][0]["loadgen"]
    assert "ttft_slo_ms" in only_ttft and "tpot_slo_ms" not in only_ttft
    assert pipeline_loadgen_problems({"type": "server", "rate": 5, "tpot_slo_ms": 0}) == [
        "pipelines[0].loadgen.tpot_slo_ms: Input should be greater than 0"
    ]

"""The loadgen registry: every config model of the spec's union is driven, and only those."""

from __future__ import annotations

import typing

import pytest

from stages.runtime.loadgen.closed_loop import ClosedLoopScenario
from stages.runtime.loadgen.kinds import LOADGEN_KINDS, arrival_process, make_scenario
from stages.runtime.loadgen.offline import OfflineScenario
from stages.runtime.loadgen.open_loop import OpenLoopScenario
from stages.spec.loadgen import LoadgenSpec, loadgen_spec


def test_registry_covers_exactly_the_union() -> None:
    union = typing.get_args(LoadgenSpec)[0]
    assert set(typing.get_args(union)) == set(LOADGEN_KINDS)


@pytest.mark.parametrize(
    ("fields", "scenario"),
    [
        ({"type": "server", "rate": 5}, OpenLoopScenario),
        ({"type": "poisson", "rate": 5}, OpenLoopScenario),
        ({"type": "constant", "rate": 5}, OpenLoopScenario),
        ({"type": "trace", "trace": "a.csv"}, OpenLoopScenario),
        ({"type": "closed_loop", "concurrency": 3}, ClosedLoopScenario),
        ({}, ClosedLoopScenario),
        ({"type": "multi_stream", "samples_per_query": 4}, ClosedLoopScenario),
        ({"type": "offline", "samples_per_query": 4}, OfflineScenario),
    ],
)
def test_each_type_gets_its_scenario(fields: dict[str, object], scenario: type) -> None:
    assert type(make_scenario(loadgen_spec(**fields), seed=1)) is scenario


def test_closed_loop_clients_and_samples_follow_the_type() -> None:
    closed = make_scenario(loadgen_spec(type="closed_loop", concurrency=3, samples_per_query=4), 1)
    multi = make_scenario(loadgen_spec(type="multi_stream", samples_per_query=4), 1)
    single = make_scenario(loadgen_spec(type="single_stream", samples_per_query=4), 1)
    assert isinstance(closed, ClosedLoopScenario)
    assert isinstance(multi, ClosedLoopScenario)
    assert isinstance(single, ClosedLoopScenario)
    assert (closed.clients(), closed.samples()) == (3, 1)
    assert (multi.clients(), multi.samples()) == (1, 4)
    assert (single.clients(), single.samples()) == (1, 1)


def test_only_open_loop_has_an_arrival_process() -> None:
    schedule = arrival_process(loadgen_spec(type="constant", rate=10)).schedule(None)  # type: ignore[arg-type]
    assert [next(schedule) for _ in range(2)] == [(0, 1), (100_000_000, 1)]
    with pytest.raises(ValueError, match="not open loop"):
        arrival_process(loadgen_spec(type="closed_loop"))

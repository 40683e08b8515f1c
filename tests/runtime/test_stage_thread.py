"""The stage thread's hot loop after the split of `PipelineRuntime`: the stage row is laid out
in `recorder.STAGE_COLUMNS` order, a recording stage's outcome stays on its own row, the
channel's public producer count, and the cycle search behind loops."""

from __future__ import annotations

import threading
import time
from typing import Any

from stages.runtime.channels import Channel
from stages.runtime.graph import StageGraph
from stages.runtime.pipeline import PipelineRuntime
from stages.runtime.query import Query
from stages.runtime.recorder import STAGE_COLUMNS, Recorder
from stages.runtime.stage import Route, Stage
from stages.spec.models import PipelineSpec, StageSpec
from tests.helpers import registry_with, rows, run_in_process

QUERIES = 20


class ReportingStage(Stage):
    """Reports an outcome derived from the query id; fails every third query after that."""

    records_outcome = True

    def run(self, query: Query) -> Route:
        query.first_token_ns = 1_000 + query.query_id
        query.tokens = 7
        query.graded = 3
        query.correct = 2
        query.loss = 0.5
        if query.query_id % 3 == 2:
            raise RuntimeError("after reporting")
        return None


REGISTRY = registry_with({"test.report": ReportingStage})


def run(stages: list[dict[str, Any]]) -> tuple[PipelineRuntime, Recorder]:
    spec = PipelineSpec.model_validate(
        {
            "name": "p",
            "loadgen": {
                "type": "closed_loop",
                "duration_s": 0,
                "max_queries": QUERIES,
                "min_queries": QUERIES,
                "timeout_s": 20,
            },
            "stages": stages,
        }
    )
    return run_in_process(spec, REGISTRY)


def test_stage_rows_land_in_their_named_columns() -> None:
    _, recorder = run(
        [
            {"id": "report", "type": "test.report", "outputs": ["after"]},
            {"id": "after", "type": "noop"},
        ]
    )
    events = rows(recorder, "stage_events")
    assert set(recorder.table("stage_events")) == set(STAGE_COLUMNS)
    reported = [e for e in events if e["stage"] == "report"]
    assert len(reported) == QUERIES
    for event in reported:
        assert event["first_token_ns"] == 1_000 + event["query_id"]
        assert (event["tokens"], event["graded"], event["correct"]) == (7, 3, 2)
        assert event["loss"] == 0.5
        assert event["visit"] == 1 and event["joined_ns"] is None
        assert event["enqueued_ns"] <= event["started_ns"] <= event["finished_ns"]
        assert event["status"] == ("error" if event["query_id"] % 3 == 2 else "ok")
    after = [e for e in events if e["stage"] == "after"]
    assert len(after) == QUERIES - len([i for i in range(QUERIES) if i % 3 == 2])
    for event in after:  # the outcome stays on the reporting stage's row
        outcome = [event[name] for name in ("first_token_ns", "tokens", "graded", "correct")]
        assert outcome == [None] * 4 and event["loss"] is None
        assert event["status"] == "ok"


def test_a_failed_call_is_an_error_row_and_the_query_ends_in_error() -> None:
    runtime, recorder = run(
        [
            {"id": "report", "type": "test.report", "outputs": ["after"]},
            {"id": "after", "type": "noop"},
        ]
    )
    failed = {q["query_id"] for q in rows(recorder, "queries") if q["status"] == "error"}
    assert failed == {i for i in range(QUERIES) if i % 3 == 2}
    assert runtime.error_rows() == [
        {
            "stage": "report",
            "first_query_id": 2,
            "count": len(failed),
            "error": "RuntimeError: after reporting",
        }
    ]
    assert runtime.counters.errors == len(failed)
    assert runtime.counters.ok == QUERIES - len(failed)


def test_join_rows_carry_the_join_time() -> None:
    _, recorder = run(
        [
            {"id": "split", "type": "route", "config": {"mode": "all"}, "outputs": ["a", "b"]},
            {"id": "a", "type": "noop", "outputs": ["merge"]},
            {"id": "b", "type": "noop", "outputs": ["merge"]},
            {"id": "merge", "type": "noop", "input_policy": "join"},
        ]
    )
    merged = [e for e in rows(recorder, "stage_events") if e["stage"] == "merge"]
    assert len(merged) == QUERIES
    for event in merged:
        assert event["enqueued_ns"] <= event["joined_ns"] <= event["started_ns"]
    assert {q["status"] for q in rows(recorder, "queries")} == {"ok"}


def test_a_blocked_producer_is_counted_until_a_consumer_wakes_it() -> None:
    channel = Channel(1)
    channel.put("first")
    producer = threading.Thread(target=channel.put, args=("second",))
    producer.start()
    deadline = time.monotonic() + 5
    while not channel.waiting_producers and time.monotonic() < deadline:
        time.sleep(0.001)
    assert channel.waiting_producers == 1
    assert channel.raw_get(True, 1.0) == "first"  # the bare get does not wake anyone ...
    channel.wake_producer()  # ... the hot loop does, on seeing the count
    producer.join(timeout=5)
    assert not producer.is_alive()
    assert channel.waiting_producers == 0
    assert channel.get(timeout=1.0) == "second"


def graph(edges: dict[str, list[str]]) -> StageGraph:
    return StageGraph(
        [StageSpec(id=name, type="noop", outputs=outputs) for name, outputs in edges.items()]
    )


def test_cycles_finds_each_loop_and_self_loop_once() -> None:
    loops = graph(
        {
            "a": ["b"],
            "b": ["c", "a"],  # a <-> b ...
            "c": ["d"],
            "d": ["c", "e"],  # ... c <-> d, a separate loop downstream
            "e": ["e", "f"],  # a self-loop
            "f": [],
        }
    )
    assert sorted(loops.cycles()) == [[0, 1], [2, 3], [4]]
    assert graph({"a": ["b"], "b": ["c"], "c": []}).cycles() == []


def test_cycles_of_a_deep_chain_do_not_recurse() -> None:
    depth = 5_000  # far past Python's recursion limit
    edges = {f"s{i}": [f"s{i + 1}"] for i in range(depth)}
    edges[f"s{depth}"] = ["s0"]
    assert graph(edges).cycles() == [list(range(depth + 1))]

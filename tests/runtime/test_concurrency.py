"""Concurrency inside a stage: `concurrency: N` threads sharing one inbox, and asynchronous
stage types with up to `max_in_flight` visits on one event loop. Recording stays one row per
visit; the number in flight is what the rows' overlapping intervals say."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

import pytest

from stages.library.core.builtin import AsyncSleepStage
from stages.runtime.async_stage import AsyncStage, AsyncStageConfig
from stages.runtime.async_thread import ASYNC_STOP_GRACE_S
from stages.runtime.pipeline import PipelineRuntime
from stages.runtime.query import Query
from stages.runtime.recorder import STAGE_COLUMNS, Recorder
from stages.runtime.stage import Route, Stage, StageConfig
from stages.spec.models import BenchmarkSpec, PipelineSpec, StageSpec
from stages.validation.checks import check_spec
from tests.helpers import registry_with, rows, run_in_process


class CountingStage(Stage[StageConfig]):
    """Counts its instances and the threads that ran it; sleeps 20 ms a visit."""

    instances: list[CountingStage] = []
    threads: set[str] = set()

    def prepare(self) -> None:
        CountingStage.instances.append(self)

    def run(self, query: Query) -> Route:
        CountingStage.threads.add(threading.current_thread().name)
        time.sleep(0.02)
        return None


class SharedCountingStage(CountingStage):
    thread_safe = True


class FailOddStage(Stage[StageConfig]):
    def run(self, query: Query) -> Route:
        time.sleep(0.002)
        if query.query_id % 2:
            raise ValueError("odd query")
        return None


class AsyncReportConfig(AsyncStageConfig):
    fail_every: int = 4


class AsyncReportStage(AsyncStage[AsyncReportConfig]):
    """Reports tokens and a first-token time from inside the coroutine; fails every 4th."""

    records_outcome = True

    async def run_async(self, query: Query) -> Route:
        await asyncio.sleep(0.005)
        query.first_token_ns = 1_000 + query.query_id
        query.tokens = query.query_id
        if query.query_id % self.config.fail_every == 3:
            raise RuntimeError("stream broke")
        return None


class AsyncHangStage(AsyncStage[AsyncStageConfig]):
    """Never answers (until cancelled)."""

    async def run_async(self, query: Query) -> Route:
        await asyncio.Event().wait()
        return None


REGISTRY = registry_with(
    {
        "async_sleep": AsyncSleepStage,
        "test.count": CountingStage,
        "test.shared_count": SharedCountingStage,
        "test.fail_odd": FailOddStage,
        "test.async_report": AsyncReportStage,
        "test.async_hang": AsyncHangStage,
    }
)


def run(
    stages: list[dict[str, Any]], queries: int, clients: int, timeout_s: float = 20
) -> tuple[PipelineRuntime, Recorder]:
    spec = PipelineSpec.model_validate(
        {
            "name": "p",
            "error_budget": None,
            "loadgen": {
                "type": "closed_loop",
                "concurrency": clients,
                "duration_s": 0,
                "max_queries": queries,
                "min_queries": queries,
                "timeout_s": timeout_s,
            },
            "stages": stages,
        }
    )
    return run_in_process(spec, REGISTRY)


def most_in_flight(events: list[dict[str, Any]]) -> int:
    """The most visits whose [started, finished) intervals overlap (a finish before a start at
    the same instant): what the `stage_concurrency` view computes."""
    edges = sorted(
        [(e["started_ns"], 1) for e in events] + [(e["finished_ns"], -1) for e in events]
    )
    level = most = 0
    for _, step in edges:
        level += step
        most = max(most, level)
    return most


def span_s(events: list[dict[str, Any]]) -> float:
    return (max(e["finished_ns"] for e in events) - min(e["started_ns"] for e in events)) / 1e9


def live_stage_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("stage:")]


def test_four_threads_serve_four_queries_at_once_with_a_row_per_visit() -> None:
    CountingStage.instances.clear()
    CountingStage.threads.clear()
    stage = {"id": "work", "type": "test.count"}
    runtime, recorder = run([{**stage, "concurrency": 4}], queries=40, clients=8)
    events = rows(recorder, "stage_events")
    assert set(recorder.table("stage_events")) == set(STAGE_COLUMNS)
    assert sorted(e["query_id"] for e in events) == list(range(40))
    assert {e["status"] for e in events} == {"ok"} and {e["visit"] for e in events} == {1}
    assert most_in_flight(events) == 4
    assert len(CountingStage.instances) == 4  # an instance per thread, each prepared once
    assert [i.context.replica for i in CountingStage.instances] == [0, 1, 2, 3]
    assert len({i.context.seed for i in CountingStage.instances}) == 4
    assert CountingStage.threads == {"stage:work", "stage:work#1", "stage:work#2", "stage:work#3"}
    assert {q["status"] for q in rows(recorder, "queries")} == {"ok"}
    assert runtime.leaked_threads == [] and live_stage_threads() == []
    _, alone = run([stage], queries=40, clients=8)
    assert most_in_flight(rows(alone, "stage_events")) == 1
    assert span_s(rows(alone, "stage_events")) > 3.0 * span_s(events)  # ~4x the throughput


def test_a_thread_safe_type_shares_one_instance() -> None:
    CountingStage.instances.clear()
    run([{"id": "work", "type": "test.shared_count", "concurrency": 3}], queries=6, clients=3)
    assert len(CountingStage.instances) == 1


def test_a_failure_in_one_thread_is_recorded_as_the_sync_path_records_it() -> None:
    runtime, recorder = run(
        [
            {"id": "work", "type": "test.fail_odd", "concurrency": 4, "outputs": ["after"]},
            {"id": "after", "type": "noop"},
        ],
        queries=40,
        clients=8,
    )
    events = rows(recorder, "stage_events")
    work = {e["query_id"]: e["status"] for e in events if e["stage"] == "work"}
    assert work == {i: "error" if i % 2 else "ok" for i in range(40)}
    after = sorted(e["query_id"] for e in events if e["stage"] == "after")
    assert after == list(range(0, 40, 2))
    statuses = {q["query_id"]: q["status"] for q in rows(recorder, "queries")}
    assert statuses == {i: "error" if i % 2 else "ok" for i in range(40)}
    # Four threads noting the same error: one row, every failure counted (no lost update).
    assert runtime.error_rows() == [
        {"stage": "work", "first_query_id": runtime.error_rows()[0]["first_query_id"],
         "count": 20, "error": "ValueError: odd query"}]  # fmt: skip
    assert runtime.leaked_threads == [] and live_stage_threads() == []


def test_an_async_stage_keeps_up_to_max_in_flight_visits_on_one_loop() -> None:
    stages: list[dict[str, Any]] = [
        {"id": "call", "type": "async_sleep", "config": {"ms": 20, "max_in_flight": 50},
         "outputs": ["after"]},
        {"id": "after", "type": "noop"},
    ]  # fmt: skip
    runtime, recorder = run(stages, queries=400, clients=120)
    events = rows(recorder, "stage_events")
    calls = [e for e in events if e["stage"] == "call"]
    assert sorted(e["query_id"] for e in calls) == list(range(400))
    assert {e["status"] for e in calls} == {"ok"}
    assert all(e["enqueued_ns"] <= e["started_ns"] <= e["finished_ns"] for e in calls)
    assert 1 < most_in_flight(calls) <= 50
    assert most_in_flight(calls) >= 40  # 120 clients keep the 50 slots busy
    assert Counter(e["stage"] for e in events)["after"] == 400
    assert {q["status"] for q in rows(recorder, "queries")} == {"ok"}
    assert span_s(calls) < 400 * 0.02 / 10  # far faster than one at a time
    assert runtime.leaked_threads == [] and live_stage_threads() == []


def test_an_async_stage_records_outcomes_and_failures_per_visit() -> None:
    stages: list[dict[str, Any]] = [
        {"id": "call", "type": "test.async_report", "concurrency": 2,
         "config": {"max_in_flight": 8}, "outputs": ["after"]},
        {"id": "after", "type": "noop"},
    ]  # fmt: skip
    runtime, recorder = run(stages, queries=40, clients=16)
    events = rows(recorder, "stage_events")
    calls = {e["query_id"]: e for e in events if e["stage"] == "call"}
    assert sorted(calls) == list(range(40))
    for query_id, event in calls.items():
        assert event["first_token_ns"] == 1_000 + query_id and event["tokens"] == query_id
        assert event["status"] == ("error" if query_id % 4 == 3 else "ok")
    for event in events:
        if event["stage"] == "after":  # the outcome stays on the reporting stage's row
            assert event["tokens"] is None and event["first_token_ns"] is None
    assert runtime.error_rows()[0]["count"] == 10
    assert runtime.error_rows()[0]["error"] == "RuntimeError: stream broke"
    assert runtime.leaked_threads == [] and live_stage_threads() == []


def test_async_visits_still_in_flight_at_shutdown_are_cancelled_and_no_thread_is_left() -> None:
    started_s = time.monotonic()
    runtime, recorder = run(
        [{"id": "hang", "type": "test.async_hang", "config": {"max_in_flight": 3}}],
        queries=5,
        clients=5,
        timeout_s=0.5,
    )
    assert time.monotonic() - started_s < 0.5 + ASYNC_STOP_GRACE_S + 1.0
    assert {q["status"] for q in rows(recorder, "queries")} == {"timeout"}
    events = rows(recorder, "stage_events")
    assert len(events) == 3  # the three in flight; the other two never left the queue
    assert {e["status"] for e in events} == {"timeout"}
    assert runtime.leaked_threads == [] and live_stage_threads() == []


def test_an_async_stage_outside_the_runtime_runs_one_visit() -> None:
    stage = AsyncSleepStage(AsyncSleepStage.config_model(ms=0), _context())
    assert stage.run(Query(1, 0, 1, None, False, 1)) is None
    assert stage.config.max_in_flight == 64
    assert AsyncSleepStage.config_model.__name__ == "AsyncSleepConfig"  # from the type parameter
    assert issubclass(AsyncSleepStage.config_model, AsyncStageConfig)


def _context() -> Any:
    from stages.runtime.stage import StageContext

    return StageContext(stage_id="s")


def test_concurrency_1_is_left_out_of_the_normal_form() -> None:
    assert "concurrency" not in StageSpec(id="a", type="noop").model_dump()
    assert StageSpec(id="a", type="noop", concurrency=3).model_dump()["concurrency"] == 3


@pytest.mark.parametrize("policy", ["join", "priority"])
def test_concurrency_needs_the_any_input_policy(policy: str) -> None:
    extra = {"priorities": ["x"]} if policy == "priority" else {}
    with pytest.raises(ValueError, match="concurrency 2 needs input_policy 'any'"):
        StageSpec(id="a", type="noop", concurrency=2, input_policy=policy, **extra)


def test_an_async_stage_type_needs_the_any_input_policy() -> None:
    pipeline = {
        "name": "p",
        "stages": [
            {"id": "a", "type": "route", "config": {"mode": "all"}, "outputs": ["b", "c"]},
            {"id": "b", "type": "noop", "outputs": ["d"]},
            {"id": "c", "type": "noop", "outputs": ["d"]},
            {"id": "d", "type": "async_sleep", "input_policy": "join"},
        ],
    }
    spec = BenchmarkSpec.model_validate({"name": "b", "pipelines": [pipeline]})
    problems = [str(problem) for problem in check_spec(spec, REGISTRY)]
    assert problems == [
        "pipelines[0].stages[3].input_policy: asynchronous stage type 'async_sleep' needs "
        "input_policy 'any'"
    ]

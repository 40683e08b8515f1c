"""A one-client closed loop without think time is driven from the completing thread: every
query after the first is issued by the thread of the stage that completed the one before it,
scheduled at that completion; the end conditions, the timeout and a pipeline stop end it as
they end the threaded loop, and an error while issuing reaches the load generator's thread."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest

from stages.runtime.driver import prepare_load, run_load
from stages.runtime.pipeline import PipelineRuntime
from stages.runtime.query import Query
from stages.runtime.recorder import Recorder
from stages.runtime.registry import default_registry
from stages.spec.models import PipelineSpec
from tests.helpers import rows


def runtime_for(
    loadgen: dict[str, Any], stages: list[dict[str, Any]] | None = None
) -> PipelineRuntime:
    spec = PipelineSpec.model_validate(
        {
            "name": "p",
            "loadgen": {"duration_s": 0, "timeout_s": 20, **loadgen},
            "stages": stages or [{"id": "a", "type": "noop", "outputs": ["b"]},
                                 {"id": "b", "type": "noop"}],
        }
    )  # fmt: skip
    recorder = Recorder(None, {}, [stage.id for stage in spec.stages], "x")
    return PipelineRuntime(spec, recorder, registry=default_registry())


def drive(runtime: PipelineRuntime) -> tuple[Any, list[str]]:
    """Run the load, noting which thread issued each query."""
    issuers: list[str] = []
    issue = runtime.issue

    def noting(query: Query, block: bool, deadline_ns: int | None = None) -> bool:
        issuers.append(threading.current_thread().name)
        return issue(query, block, deadline_ns)

    runtime.issue = noting
    runtime.prepare()
    runtime.start()
    # The window opens 50 ms from now, as after a collocated run's start barrier.
    outcome = run_load(runtime, prepare_load(runtime, 0), time.monotonic_ns() + 50_000_000)
    runtime.recorder.close()
    return outcome, issuers


@pytest.mark.parametrize("kind", ["single_stream", "closed_loop"])
def test_the_completing_thread_issues_the_next_query(kind: str) -> None:
    runtime = runtime_for({"type": kind, "max_queries": 200, "min_queries": 200})
    result, issuers = drive(runtime)
    assert result.outcome.stopped_by == "max_queries" and result.outcome.issued == 200
    assert issuers[0] == threading.current_thread().name
    assert set(issuers[1:]) == {"stage:b"}  # the last stage's thread
    queries = sorted(rows(runtime.recorder, "queries"), key=lambda q: q["query_id"])
    assert [q["status"] for q in queries] == ["ok"] * 200
    assert not any(q["warmup"] for q in queries)  # none issued before the window opened
    assert all(q["issued_ns"] >= q["scheduled_ns"] for q in queries)
    assert queries[0]["scheduled_ns"] == result.outcome.start_ns
    for previous, current in itertools.pairwise(queries):
        assert current["scheduled_ns"] == previous["completed_ns"]  # no think time


def test_two_clients_or_think_time_keep_the_issuing_thread() -> None:
    for loadgen in ({"concurrency": 2}, {"think_time_ms": 1}):
        runtime = runtime_for({"type": "closed_loop", "max_queries": 40, "min_queries": 40,
                               **loadgen})  # fmt: skip
        _, issuers = drive(runtime)
        assert set(issuers) == {threading.current_thread().name}, loadgen


def test_a_stopped_pipeline_ends_the_loop_and_the_due_query_is_recorded() -> None:
    """Every query fails; an error budget of 5 stops the pipeline: the loop ends `pipeline`,
    nothing is issued after the stop, and the query that was due then is `not_issued`."""
    stages = [{"id": "a", "type": "fail", "config": {"every": 1}}]
    spec_budget = {"type": "single_stream", "duration_s": 5, "min_queries": 1000}
    runtime = runtime_for(spec_budget, stages)
    runtime.completion.error_budget = 5
    result, issuers = drive(runtime)
    assert result.outcome.stopped_by == "pipeline"
    statuses = [q["status"] for q in rows(runtime.recorder, "queries")]
    assert statuses.count("error") == len(issuers) == result.outcome.issued == 5
    assert statuses.count("not_issued") == result.outcome.not_issued == 1


def test_the_timeout_ends_a_loop_whose_query_never_completes() -> None:
    """The only query hangs until shutdown, so no completion ever calls the client again: the
    load generator's thread ends the loop at `timeout_s` itself (else this run never ends)."""
    stages = [{"id": "a", "type": "fail", "config": {"at_query": 0, "mode": "hang"}}]
    runtime = runtime_for({"type": "single_stream", "duration_s": 0.2, "timeout_s": 0.6}, stages)
    ended: list[tuple[Any, list[str]]] = []
    driver = threading.Thread(target=lambda: ended.append(drive(runtime)), daemon=True)
    driver.start()
    driver.join(timeout=30)
    assert ended, "the loop did not end at its timeout"
    result, issuers = ended[0]
    assert result.outcome.stopped_by == "timeout" and len(issuers) == 1


def test_an_error_while_issuing_is_raised_in_the_load_generators_thread() -> None:
    runtime = runtime_for({"type": "single_stream", "max_queries": 50, "min_queries": 50})
    new_query = runtime.new_query

    def failing(query_id: int, *args: Any, **kwargs: Any) -> Query:
        if query_id == 10:
            raise RuntimeError("query ten")
        return new_query(query_id, *args, **kwargs)

    runtime.new_query = failing  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="query ten"):
        drive(runtime)
    assert runtime.issued == 10
    # A load generator's error leaves the pipeline to the worker, which reports it and exits;
    # here, stop the stage threads so no later test sees them.
    assert runtime.finish(time.monotonic_ns() + 5_000_000_000, runtime.recorder.buffer())
    runtime.recorder.close()

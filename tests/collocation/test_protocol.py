"""The worker <-> launcher protocol: every message survives a real pipe, a payload that is not
exactly a message raises, and the counters a worker reports reach the outcome, the manifest's
results and MLflow under the one spelling of `stages.contracts.counters`."""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection
from typing import Any

import pytest

from stages.cli.mlflow_log import _COUNT_FIELDS
from stages.collocation import protocol
from stages.collocation.barrier import start_together
from stages.collocation.protocol import (
    KINDS,
    Done,
    Failed,
    Message,
    NextTask,
    Progress,
    ProtocolError,
    Ready,
    Start,
)
from stages.collocation.results import PipelineOutcome, ProgressEvent
from stages.collocation.supervision import Supervisor, WorkerHandle
from stages.contracts.counters import QUERY_COUNTS, QueryCounters
from stages.contracts.warnings import WarningCode, WarningRecord
from stages.rundir.manifest import PipelineResult
from stages.runtime.counters import Tally, snapshot


def _snapshot(base: int) -> QueryCounters:
    """A snapshot whose every field holds a different value (so a swap or a rename shows)."""
    values: dict[str, Any] = {}
    for index, name in enumerate(QueryCounters.model_fields):
        values[name] = base + index
    values["live_p99_ms"] = base + 0.25
    return QueryCounters(**values)


PROGRESS = Progress(_snapshot(100))
DONE = Done(
    status="ok",
    error=None,
    stopped_by="duration",
    not_issued=7,
    leaked_threads=["stage-a"],
    counters=_snapshot(200),
    stage_warnings=[{"stage": "llm", "message": "input_tokens not checked", "visits": 3}],
)
EXAMPLES: list[Message] = [
    Ready(pid=1234),
    Start(start_ns=987_654_321),
    NextTask(task={"run_id": "r2", "trial": 0, "pipeline": {"name": "p"}}),
    PROGRESS,
    DONE,
    Failed(error="ValueError: boom", traceback="Traceback ..."),
]


def test_every_kind_has_an_example() -> None:
    assert sorted(protocol.kind_of(message) for message in EXAMPLES) == sorted(KINDS)


@pytest.mark.parametrize("message", EXAMPLES, ids=protocol.kind_of)
def test_each_message_round_trips_through_a_real_pipe(message: Message) -> None:
    sender, receiver = multiprocessing.get_context("spawn").Pipe(duplex=True)
    try:
        protocol.send(sender, message)
        assert receiver.poll(5)
        assert protocol.receive(receiver) == message
    finally:
        sender.close()
        receiver.close()


def test_an_unknown_kind_raises() -> None:
    with pytest.raises(ProtocolError, match="unknown message kind 'finished'"):
        protocol.decode({"kind": "finished", "status": "ok"})


def test_a_payload_without_a_kind_or_not_a_dict_raises() -> None:
    with pytest.raises(ProtocolError, match="unknown message kind None"):
        protocol.decode({"start_ns": 1})
    with pytest.raises(ProtocolError, match="a message is a dict"):
        protocol.decode(["start", 1])


def test_a_missing_field_raises() -> None:
    payload = protocol.encode(DONE)
    del payload["not_issued"]
    with pytest.raises(ProtocolError, match=r"missing fields \['not_issued'\]"):
        protocol.decode(payload)


def test_an_unknown_field_raises() -> None:
    payload = protocol.encode(Start(start_ns=5))
    payload["start_s"] = 0
    with pytest.raises(ProtocolError, match=r"unknown fields \['start_s'\]"):
        protocol.decode(payload)


def test_a_renamed_counter_raises_instead_of_reading_zero() -> None:
    payload = protocol.encode(PROGRESS)
    payload["counters"]["error"] = payload["counters"].pop("errors")
    with pytest.raises(
        ProtocolError, match=r"progress.counters: missing fields \['errors'\], unknown fields"
    ):
        protocol.decode(payload)


def test_nested_counters_must_be_a_dict() -> None:
    payload = protocol.encode(PROGRESS)
    payload["counters"] = 3
    with pytest.raises(ProtocolError, match="expected a dict"):
        protocol.decode(payload)


def test_a_message_out_of_turn_raises() -> None:
    with pytest.raises(ProtocolError, match="expected a start message"):
        protocol.expect(Ready(pid=1), Start)
    assert protocol.expect(Start(start_ns=3), Start) == Start(start_ns=3)


def test_counters_are_spelled_once_from_the_runtime_to_mlflow() -> None:
    snapshot_fields = set(QueryCounters.model_fields)
    outcome_fields = set(PipelineOutcome(0, "solo", "p").row())  # the manifest's row
    result_fields = set(PipelineResult.model_fields)
    assert set(QUERY_COUNTS) <= snapshot_fields
    assert snapshot_fields <= outcome_fields
    assert snapshot_fields <= result_fields
    assert set(_COUNT_FIELDS) == {*QUERY_COUNTS, "not_issued"}
    assert set(_COUNT_FIELDS) <= outcome_fields


def test_a_snapshot_sums_the_threads_tallies() -> None:
    first, second = Tally(), Tally()
    first.ok, first.errors, first.samples_ok, first.last_completed_ns = 2, 1, 4, 8
    second.ok, second.dropped, second.timeouts, second.last_completed_ns = 3, 4, 5, 6
    counters = snapshot(
        [first, second],
        issued=15,
        first_issue_ns=7,
        measured=9,
        measured_over_slo=1,
        inflight=2,
        live_p99_ms=9.0,
    )
    assert counters == QueryCounters(
        issued=15,
        ok=5,
        errors=1,
        dropped=4,
        timeouts=5,
        samples_ok=4,
        first_issue_ns=7,
        last_completed_ns=8,
        measured=9,
        measured_over_slo=1,
        inflight=2,
        live_p99_ms=9.0,
    )


def test_a_wrongly_typed_counter_raises() -> None:
    payload = protocol.encode(PROGRESS)
    payload["counters"]["ok"] = "many"
    with pytest.raises(ProtocolError, match=r"progress\.counters: "):
        protocol.decode(payload)


def _fake_worker(connection: Connection) -> None:
    """A worker that speaks the protocol and nothing else (runs in a spawned process)."""
    protocol.send(connection, Ready(pid=multiprocessing.current_process().pid or 0))
    protocol.expect(protocol.receive(connection), Start)
    protocol.send(connection, PROGRESS)
    protocol.send(connection, DONE)
    connection.close()


@pytest.mark.spawns
def test_the_counters_a_worker_reports_arrive_in_the_outcome() -> None:
    context = multiprocessing.get_context("spawn")
    parent_end, child_end = context.Pipe(duplex=True)
    process = context.Process(target=_fake_worker, args=(child_end,), name="fake-worker")
    process.start()
    child_end.close()
    events: list[ProgressEvent] = []
    warnings: list[str] = []
    supervisor = Supervisor(context, events.append, warnings)
    worker = WorkerHandle(PipelineOutcome(0, "solo", "p", pid=process.pid), process, parent_end)
    supervisor.await_ready([worker])
    assert worker.ready
    start_together([worker], {"p": 10.0})
    supervisor.await_done([worker])
    supervisor.reap(worker)

    row = worker.outcome.row()  # what the manifest's `results` holds
    for name in QueryCounters.model_fields:
        assert row[name] == getattr(DONE.counters, name), name
    assert (row["status"], row["error"], row["exit_code"]) == ("ok", None, 0)
    assert (row["not_issued"], row["stopped_by"]) == (7, "duration")
    progress = next(event for event in events if event.kind == "progress")
    for name in QueryCounters.model_fields:
        assert progress.data[name] == getattr(PROGRESS.counters, name), name
    assert events[-1].kind == "done"
    assert warnings == [
        "p (trial 0, solo): stage threads still running at shutdown: stage-a",
        "p (trial 0, solo): stage 'llm': input_tokens not checked (3 visits)",
    ]
    # What a stage warned about is a typed record: its code and figures for readers.
    stage_warning = WarningRecord.of(warnings[1])
    assert stage_warning.code == WarningCode.STAGE_WARNING
    assert stage_warning.details == {"pipeline": "p", "trial": 0, "phase": "solo",
                                     "stage": "llm", "message": "input_tokens not checked",
                                     "visits": 3}  # fmt: skip


def test_an_outcome_rejects_a_counter_it_does_not_have() -> None:
    outcome = PipelineOutcome(0, "solo", "p")
    with pytest.raises(AttributeError):
        outcome.timeout = 1  # type: ignore[attr-defined]

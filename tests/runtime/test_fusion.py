"""Stage fusion (`fuse: true`): a fused stage runs in the thread of the stage before it, each
stage still records its own row, failures end the query as before, and a fuse that cannot
hold is refused by `validate` with the path and the reason."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from stages.cli.app import app
from stages.runtime.fusion import MAX_FUSED_CHAIN
from stages.runtime.pipeline import PipelineRuntime
from stages.runtime.query import Query
from stages.runtime.recorder import Recorder
from stages.runtime.stage import Route, Stage
from stages.spec.models import PipelineSpec
from tests.helpers import registry_with, rows, run_in_process

QUERIES = 30


class ThreadNoting(Stage):
    """Notes which thread ran it, per stage id; fails query 7 when its id is `fails`."""

    seen: ClassVar[dict[str, set[str]]] = {}

    def run(self, query: Query) -> Route:
        stage_id = self.context.stage_id
        ThreadNoting.seen.setdefault(stage_id, set()).add(threading.current_thread().name)
        if stage_id == "fails" and query.query_id == 7:
            raise RuntimeError("seven")
        return None


REGISTRY = registry_with({"test.thread": ThreadNoting})


def chain(ids: list[str], **fields: Any) -> dict[str, Any]:
    """A pipeline document: the stages `ids` in a line, each a `test.thread` stage."""
    stages = [
        {"id": stage_id, "type": "test.thread", "outputs": ids[index + 1 : index + 2]}
        for index, stage_id in enumerate(ids)
    ]
    return {"name": "p", "stages": stages, **fields}


def run(
    document: dict[str, Any], loadgen: dict[str, Any] | None = None
) -> tuple[PipelineRuntime, Recorder]:
    ThreadNoting.seen = {}
    spec = PipelineSpec.model_validate(
        {
            "loadgen": loadgen or {"type": "closed_loop", "duration_s": 0, "max_queries": QUERIES,
                                   "min_queries": QUERIES, "timeout_s": 20},
            **document,
        }
    )  # fmt: skip
    return run_in_process(spec, REGISTRY)


def thread_names(runtime: PipelineRuntime) -> list[str]:
    return [thread.name for node in runtime.nodes for thread in node.threads]


@pytest.mark.parametrize("where", ["pipeline", "stages"])
def test_a_fused_chain_runs_in_one_thread_and_records_every_stage(where: str) -> None:
    """`fuse` on the pipeline, or on each stage after the first: one thread runs a, b and c;
    each query has a row per stage, each stage's `enqueued_ns` the finish of the one before
    (no queue between them), and every query completes ok."""
    document = chain(["a", "b", "c"], **({"fuse": True} if where == "pipeline" else {}))
    if where == "stages":
        for stage in document["stages"][1:]:
            stage["fuse"] = True
    runtime, recorder = run(document)
    assert thread_names(runtime) == ["stage:a"]
    assert ThreadNoting.seen == {"a": {"stage:a"}, "b": {"stage:a"}, "c": {"stage:a"}}
    events = rows(recorder, "stage_events")
    by_query: dict[int, dict[str, dict[str, Any]]] = {}
    for event in events:
        by_query.setdefault(event["query_id"], {})[event["stage"]] = event
    assert len(by_query) == QUERIES and all(len(stages) == 3 for stages in by_query.values())
    for stages in by_query.values():
        for before, after in (("a", "b"), ("b", "c")):
            assert stages[after]["enqueued_ns"] == stages[before]["finished_ns"]
            assert stages[after]["started_ns"] >= stages[before]["finished_ns"]
    queries = rows(recorder, "queries")
    assert len(queries) == QUERIES and {query["status"] for query in queries} == {"ok"}
    assert runtime.counters.ok == QUERIES


def test_a_failure_inside_a_fused_chain_ends_that_query_only() -> None:
    """The middle stage fails query 7: its row and the error are recorded, the stage after it
    never sees query 7, and the other queries complete ok, all in one thread."""
    runtime, recorder = run(chain(["a", "fails", "c"], fuse=True))
    assert thread_names(runtime) == ["stage:a"]
    events = rows(recorder, "stage_events")
    assert [e["status"] for e in events if e["query_id"] == 7] == ["ok", "error"]
    statuses = {query["query_id"]: query["status"] for query in rows(recorder, "queries")}
    assert (
        statuses[7] == "error"
        and sum(status == "ok" for status in statuses.values()) == QUERIES - 1
    )
    (error,) = runtime.error_rows()
    assert "seven" in error["error"]


def test_an_open_loop_run_of_a_fused_chain_accounts_for_every_query() -> None:
    """At 400 q/s for 0.5 s, with the flush periods and the idle collector of an open loop:
    every issued query completes, with three stage rows each."""
    runtime, recorder = run(
        chain(["a", "b", "c"], fuse=True),
        {"type": "server", "rate": 400, "duration_s": 0.5, "timeout_s": 20},
    )
    queries = rows(recorder, "queries")
    assert len(queries) == runtime.issued > 100
    assert {query["status"] for query in queries} == {"ok"}
    assert len(rows(recorder, "stage_events")) == 3 * len(queries)


def test_the_pipeline_fuses_only_the_links_that_can_be() -> None:
    """A fork (a -> b, a -> c) keeps its threads; the linear tail c -> d is fused."""
    document = {
        "name": "p",
        "fuse": True,
        "stages": [
            {"id": "a", "type": "test.thread", "outputs": ["b", "c"]},
            {"id": "b", "type": "test.thread"},
            {"id": "c", "type": "test.thread", "outputs": ["d"]},
            {"id": "d", "type": "test.thread"},
        ],
    }
    runtime, recorder = run(document)
    assert runtime.fused == {3: 2}
    assert sorted(thread_names(runtime)) == ["stage:a", "stage:b", "stage:c"]
    assert ThreadNoting.seen["d"] == {"stage:c"}
    assert len(rows(recorder, "stage_events")) == 4 * QUERIES


def test_a_long_chain_is_split_into_threads_of_the_longest_fused_chain() -> None:
    ids = [f"s{index}" for index in range(MAX_FUSED_CHAIN + 8)]
    runtime, recorder = run(chain(ids, fuse=True))
    assert thread_names(runtime) == ["stage:s0", f"stage:s{MAX_FUSED_CHAIN}"]
    assert len(rows(recorder, "stage_events")) == len(ids) * QUERIES


SPEC = """
name: f
pipelines:
  - name: p
    stages:
{stages}
"""


@pytest.mark.parametrize(
    ("stages", "expected"),
    [
        ("      - {id: a, type: noop, outputs: [b, c]}\n"
         "      - {id: b, type: noop, fuse: true}\n"
         "      - {id: c, type: noop}\n",
         "pipelines[0].stages[1].fuse: fuse needs a linear link; 'a', the stage before it, has "
         "2 outputs"),
        ("      - {id: a, type: noop, outputs: [c]}\n"
         "      - {id: b, type: noop, outputs: [c]}\n"
         "      - {id: c, type: noop, fuse: true}\n",
         "pipelines[0].stages[2].fuse: fuse needs exactly one input stage; 'c' has 2"),
        ("      - {id: a, type: noop, fuse: true}\n",
         "pipelines[0].stages[0].fuse: fuse needs exactly one input stage; 'a' has 0"),
        ("      - {id: a, type: noop, outputs: [b]}\n"
         "      - {id: b, type: noop, fuse: true, concurrency: 2}\n",
         "pipelines[0].stages[1].fuse: fuse needs concurrency 1; 'b' has 2"),
        ("      - {id: a, type: noop, outputs: [b]}\n"
         "      - {id: b, type: noop, outputs: [c], max_visits: 2}\n"
         "      - {id: c, type: route, config: {mode: loop, back_to: b, times: 1}, outputs: [b], "
         "fuse: true}\n",
         "pipelines[0].stages[2].fuse: fuse cannot take a stage on a cycle"),
    ],
    ids=["after a fork", "two inputs", "an entry", "concurrency", "a cycle"],
)  # fmt: skip
def test_a_fuse_that_cannot_hold_is_refused(tmp_path: Path, stages: str, expected: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(stages=stages))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"{path}: {expected}"

"""Operator profiling: sampled queries get operator spans on the run's clock, inside their stage
event; off, nothing is written; the table loads into DuckDB and `operator_summary` sums it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest
from pydantic import Field

from analysis.warehouse.loader import load_runs
from stages.library.core.profiling import WINDOW, OperatorProfiler, realtime_minus_monotonic_ns
from stages.library.core.torch_common import ModelStageConfig, device_synchronizer
from stages.rundir.tables import merge_parts, read_table
from stages.runtime.driver import run_pipeline
from stages.runtime.query import Query
from stages.runtime.registry import stage_type
from stages.runtime.stage import Route, Stage, StageContext
from stages.spec.models import PipelineSpec

torch = pytest.importorskip("torch")

KEYS = {"run_id": "prof", "trial": 0, "phase": "solo", "pipeline": "p"}


class TinyCnnConfig(ModelStageConfig):
    batch: int = Field(2, ge=1, description="Images per query.")


@stage_type("test.tiny_cnn")
class TinyCnnStage(Stage[TinyCnnConfig]):
    """Test stage: one query = one forward pass of a tiny CNN over `batch` 8x8 images."""

    def prepare(self) -> None:
        torch.manual_seed(self.context.seed % 2**31)
        self.model = torch.nn.Sequential(
            torch.nn.Conv2d(1, 4, 3),
            torch.nn.ReLU(),
            torch.nn.Flatten(),
            torch.nn.Linear(4 * 6 * 6, 10),
        ).eval()
        self.images = torch.randn(self.config.batch, 1, 8, 8)
        self.synchronize = device_synchronizer(self.context.device)
        self.profiler = OperatorProfiler(self.config.profile_every, self.context)

    def run(self, query: Query) -> Route:
        with torch.inference_mode(), self.profiler.around(query):
            logits = self.model(self.images)
        query.payload = {"classes": logits.argmax(1)}
        self.synchronize()
        return None


def cnn_pipeline(profile_every: int, queries: int = 10) -> PipelineSpec:
    return PipelineSpec.model_validate(
        {
            "name": "p",
            "loadgen": {
                "type": "single_stream",
                "duration_s": 0,
                "min_queries": queries,
                "max_queries": queries,
                "timeout_s": 60,
            },
            "stages": [
                {"id": "pre", "type": "noop", "outputs": ["cnn"]},
                {"id": "cnn", "type": "test.tiny_cnn", "config": {"profile_every": profile_every}},
            ],
        }
    )


def run_cnn(tmp_path: Path, profile_every: int) -> Path:
    run_dir = tmp_path / "prof"
    run_dir.mkdir()
    result, _ = run_pipeline(cnn_pipeline(profile_every), run_dir=run_dir, keys=KEYS)
    assert result.status == "ok", result.error
    merge_parts(run_dir)
    (run_dir / "manifest.json").write_text(json.dumps({"run_id": "prof", "status": "ok"}))
    return run_dir


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_cnn(tmp_path_factory.mktemp("profiled"), profile_every=3)


def test_every_third_query_in_run_order_is_profiled(profiled_run: Path) -> None:
    spans = read_table(profiled_run, "operator_spans").to_pylist()
    events = read_table(profiled_run, "stage_events").to_pylist()
    cnn_order = [
        e["query_id"] for e in sorted(events, key=lambda e: e["started_ns"]) if e["stage"] == "cnn"
    ]
    assert len(cnn_order) == 10
    expected = {cnn_order[2], cnn_order[5], cnn_order[8]}  # the 3rd, 6th and 9th runs
    assert {s["query_id"] for s in spans} == expected
    assert {(s["stage"], s["visit"]) for s in spans} == {("cnn", 1)}
    assert {s["run_id"] for s in spans} == {"prof"} and {s["pipeline"] for s in spans} == {"p"}
    for query_id in expected:
        mine = [s for s in spans if s["query_id"] == query_id]
        assert sum(s["device_type"] == WINDOW for s in mine) == 1
        operators = {s["operator"] for s in mine}
        assert {"aten::conv2d", "aten::linear"} <= operators, operators
        conv = next(s for s in mine if s["operator"] == "aten::conv2d")
        assert conv["device_type"] == "cpu" and conv["thread_id"] is not None
        assert (
            0
            <= conv["self_cpu_ns"]
            <= conv["total_cpu_ns"]
            <= conv["end_ns"] - conv["start_ns"] + 1000
        )
        assert conv["input_shapes"] is None  # off by default


def test_spans_lie_inside_their_stage_event(profiled_run: Path) -> None:
    spans = read_table(profiled_run, "operator_spans").to_pylist()
    events = {
        (e["query_id"], e["stage"], e["visit"]): e
        for e in read_table(profiled_run, "stage_events").to_pylist()
    }
    assert spans  # no spans would pass the loop below vacuously
    for span in spans:
        event = events[(span["query_id"], span["stage"], span["visit"])]
        assert event["started_ns"] <= span["start_ns"] <= span["end_ns"] <= event["finished_ns"], (
            span["operator"],
            span["start_ns"] - event["started_ns"],
            event["finished_ns"] - span["end_ns"],
        )


def test_off_writes_no_table(tmp_path: Path) -> None:
    run_dir = run_cnn(tmp_path, profile_every=0)
    assert not (run_dir / "operator_spans.parquet").exists()
    assert read_table(run_dir, "operator_spans").num_rows == 0
    assert read_table(run_dir, "stage_events").num_rows == 20


def test_table_loads_and_operator_summary_sums_it(profiled_run: Path, tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    for _ in range(2):  # idempotent
        (result,) = load_runs([profiled_run], db)
    spans = read_table(profiled_run, "operator_spans").to_pylist()
    assert result.rows["operator_spans"] == len(spans)
    connection = duckdb.connect(str(db), read_only=True)
    summary = connection.execute(
        "SELECT operator, calls, profiled_queries, self_cpu_ms, total_cpu_ms, span_ms, "
        "profiled_service_ms, self_share FROM operator_summary "
        "WHERE run_id = 'prof' AND stage = 'cnn' ORDER BY operator"
    ).fetchall()
    by_operator = {row[0]: row for row in summary}
    conv = by_operator["aten::conv2d"]
    expected_self = sum(s["self_cpu_ns"] for s in spans if s["operator"] == "aten::conv2d")
    assert conv[1] == 3 and conv[2] == 3
    assert conv[3] == pytest.approx(expected_self / 1e6)
    assert conv[3] <= conv[4]
    assert WINDOW not in {row[0] for row in summary}
    assert "[profiler window]" not in by_operator
    # Self times of the CPU operators of one thread never exceed the stage's service time.
    assert 0 < sum(row[7] for row in summary) <= 1.0
    profiled = connection.execute(
        "SELECT count(*), count(DISTINCT query_id) FROM profiled_queries WHERE run_id = 'prof'"
    ).fetchone()
    assert profiled == (3, 3)


def test_a_sample_taken_while_another_stage_profiles_moves_to_the_next_query() -> None:
    context = StageContext(stage_id="a")
    profiler = OperatorProfiler(2, context)
    other = OperatorProfiler(1, StageContext(stage_id="b"))
    queries = [Query(i, 0, stage_count=1) for i in range(5)]
    with other.around(queries[0]):  # b profiles for this whole block
        for query in queries[:2]:
            with profiler.around(query):
                pass
    assert profiler.deferred == 1 and profiler.profiled_queries == 0
    with profiler.around(queries[2]):  # the deferred sample
        pass
    assert profiler.profiled_queries == 1


def test_rows_reach_the_sink_on_the_monotonic_clock() -> None:
    sunk: list[tuple[str, list[dict[str, Any]]]] = []
    context = StageContext(stage_id="m", write_rows=lambda table, rows: sunk.append((table, rows)))
    profiler = OperatorProfiler(1, context, record_shapes=True)
    query = Query(7, 0, stage_count=1)
    query.visits[0] = 2
    x = torch.randn(4, 4)
    before_ns = time.monotonic_ns()
    with profiler.around(query):
        x @ x
    after_ns = time.monotonic_ns()
    ((table, rows),) = sunk
    assert table == "operator_spans"
    matmul = next(r for r in rows if r["operator"] == "aten::matmul")
    assert before_ns <= matmul["start_ns"] <= matmul["end_ns"] <= after_ns
    assert (matmul["query_id"], matmul["stage"], matmul["visit"]) == (7, "m", 2)
    assert json.loads(matmul["input_shapes"]) == [[4, 4], [4, 4]]
    assert abs(realtime_minus_monotonic_ns() - (time.time_ns() - time.monotonic_ns())) < 1e6


def test_off_costs_no_profiler_and_rejects_negative() -> None:
    profiler = OperatorProfiler(0, StageContext(stage_id="m"))
    query = Query(0, 0, stage_count=1)
    for _ in range(100):
        with profiler.around(query):
            pass
    assert profiler.profiled_queries == 0
    with pytest.raises(ValueError, match="profile_every"):
        OperatorProfiler(-1, StageContext(stage_id="m"))

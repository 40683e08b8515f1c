"""The public LLM trace formats replayed with their request shapes: Mooncake JSON lines, Azure
and BurstGPT CSVs, a column mapping for any other file; a window and a time scale; every bad
trace refused in one line with the file and the row; and a replay whose queries arrive at the
trace's offsets carrying its lengths and prefix hash_ids to the entry stage."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from stages.runtime.driver import run_pipeline
from stages.runtime.loadgen.trace_formats import TraceError, read_trace
from stages.runtime.query import Query
from stages.runtime.registry import stage_type
from stages.runtime.stage import Route, Stage, StageConfig
from stages.spec.loadgen import loadgen_spec
from stages.spec.models import PipelineSpec
from tests.helpers import rows

MOONCAKE = [
    {"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [0, 1, 2]},
    {"timestamp": 20, "input_length": 1200, "output_length": 8, "hash_ids": [0, 1, 3]},
    {"timestamp": 20, "input_length": 512, "output_length": 1, "hash_ids": [4]},
    {"timestamp": 1500, "input_length": 700, "output_length": 30, "hash_ids": [0, 5]},
]


def _mooncake(folder: Path, records: list[dict[str, Any]] = MOONCAKE) -> Path:
    path = folder / "mooncake.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def _shapes(path: Path, **loadgen: Any) -> list[tuple[int, Any]]:
    spec = loadgen_spec(type="trace", trace=str(path), **loadgen)
    return [(request.offset_ns, request.shape) for request in read_trace(path, spec)]


def test_a_mooncake_trace_carries_its_lengths_and_hash_ids(tmp_path: Path) -> None:
    assert _shapes(_mooncake(tmp_path), trace_format="mooncake") == [
        (0, {"input_tokens": 6955, "output_tokens": 52, "hash_ids": [0, 1, 2]}),
        (20_000_000, {"input_tokens": 1200, "output_tokens": 8, "hash_ids": [0, 1, 3]}),
        (20_000_000, {"input_tokens": 512, "output_tokens": 1, "hash_ids": [4]}),
        (1_500_000_000, {"input_tokens": 700, "output_tokens": 30, "hash_ids": [0, 5]}),
    ]


def test_azure_and_burstgpt_traces_by_name(tmp_path: Path) -> None:
    azure = tmp_path / "azure.csv"
    azure.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
    )
    (first, second) = _shapes(azure, trace_format="azure")
    assert first == (0, {"input_tokens": 374, "output_tokens": 44})
    assert second[0] == pytest.approx(4_314_579_000, abs=1_000)  # clock times, from the first
    burst = tmp_path / "burstgpt.csv"
    burst.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,GPT-4,1087,230,1317,API log\n"
    )
    assert _shapes(burst, trace_format="burstgpt") == [
        (5_000_000_000, {"input_tokens": 472, "output_tokens": 18}),
        (45_000_000_000, {"input_tokens": 1087, "output_tokens": 230}),
    ]


def test_a_column_mapping_a_window_and_a_time_scale(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text("arrival_s,prompt,completion\n0,10,1\n1,20,2\n2,30,3\n3,40,4\n")
    columns = {"offset": "arrival_s", "offset_unit": "s", "input_tokens": "prompt"}
    columns |= {"output_tokens": "completion"}
    assert _shapes(
        path, trace_columns=columns, trace_start_s=1, trace_duration_s=2, trace_time_scale=0.5
    ) == [
        (0, {"input_tokens": 20, "output_tokens": 2}),
        (500_000_000, {"input_tokens": 30, "output_tokens": 3}),
    ]


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([{"timestamp": 10}, {"timestamp": 5}], "row 2: offsets must be >= 0 and non-decreasing"),
        ([{"timestamp": -1}], "row 1: offsets must be >= 0"),
        ([{"input_length": 3}], "needs a non-empty column `timestamp`"),
        ([{"timestamp": 0, "input_length": 0}], "row 1: `input_length` 0 is not an integer >= 1"),
        ([{"timestamp": 0}, {"timestamp": 1, "output_length": 2.5}], "row 2: `output_length`"),
        ([{"timestamp": 0, "hash_ids": "x"}], "row 1: hash_ids must be a list of integers"),
        ([{"timestamp": "soon"}], "row 1: offset 'soon' is not a number"),
    ],
)
def test_a_bad_trace_is_one_line_with_the_file_and_row(
    tmp_path: Path, records: list[dict[str, Any]], message: str
) -> None:
    path = _mooncake(tmp_path, records)
    with pytest.raises(TraceError) as raised:
        _shapes(path, trace_format="mooncake")
    assert str(raised.value).startswith(f"{path}: ")
    assert message in str(raised.value) and "\n" not in str(raised.value)


SEEN: list[tuple[int, Any]] = []
SEEN_LOCK = threading.Lock()


@stage_type("test.remember_payload")
class RememberPayload(Stage[StageConfig]):
    """Keeps each query's payload as the entry stage got it."""

    def run(self, query: Query) -> Route:
        with SEEN_LOCK:
            SEEN.append((query.query_id, query.payload))
        return None


def test_a_replay_hands_each_query_its_requests_shape(tmp_path: Path) -> None:
    SEEN.clear()
    path = _mooncake(tmp_path)
    pipeline = PipelineSpec.model_validate(
        {
            "name": "p",
            "loadgen": {
                "type": "trace",
                "trace": str(path),
                "trace_format": "mooncake",
                "trace_time_scale": 0.1,
                "duration_s": 5,
                "timeout_s": 20,
            },
            "stages": [{"id": "s", "type": "test.remember_payload"}],
        }
    )
    result, recorder = run_pipeline(pipeline)
    assert result.outcome.stopped_by == "schedule_end"
    queries = sorted(rows(recorder, "queries"), key=lambda q: q["query_id"])
    start = result.outcome.start_ns
    assert [q["scheduled_ns"] - start for q in queries] == [0, 2_000_000, 2_000_000, 150_000_000]
    assert sorted(SEEN, key=lambda seen: seen[0]) == [
        (index, {"input_tokens": r["input_length"], "output_tokens": r["output_length"]}
         | {"hash_ids": r["hash_ids"]})
        for index, r in enumerate(MOONCAKE)
    ]  # fmt: skip

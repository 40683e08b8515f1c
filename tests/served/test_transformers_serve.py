"""Against the real server: `transformers serve` (Hugging Face's OpenAI-compatible server)
serving `tiny_lm`, started by the benchmark on 127.0.0.1 with a free port. One run of two
trials: the first measures (requests overlap, TTFT, tokens, token_events, the server's process
in the host samples); in the second the server is killed mid-window, so the pipeline fails with
the reason and its earlier rows still load. One server start for the whole module."""

from __future__ import annotations

import json
import os
import signal
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import duckdb
import psutil
import pytest

from analysis.warehouse.loader import load_runs
from stages import settings
from stages.collocation.results import ProgressEvent
from stages.rundir.manifest import read_manifest
from tests.helpers import run

pytestmark = [pytest.mark.slow, pytest.mark.spawns]

KILL_AFTER_MEASURED = 8
"""The server is killed once the second trial has recorded this many measured queries."""


SHAPED_INPUT_TOKENS = 128
SHAPED_OUTPUT_TOKENS = {"distribution": "empirical", "values": [4, 12]}
SHAPED_PIPELINE = {
    "name": "shaped",
    "loadgen": {"type": "closed_loop", "concurrency": 2, "duration_s": 6, "timeout_s": 60},
    "stages": [
        {
            "id": "synthetic",
            "type": "dataset.synthetic_prompts",
            "config": {"input_tokens": SHAPED_INPUT_TOKENS, "output_tokens": SHAPED_OUTPUT_TOKENS},
            "outputs": ["shaped_llm"],
        },
        {
            "id": "shaped_llm",
            "type": "http.openai",
            "config": {"service": "llm", "api": "chat", "enforce_output": "generation_config"},
        },
    ],
}
"""Requests built for exactly 128 input tokens (chat template included) and 4 or 12 output
tokens, against the same server (one start): a difference fails the visit with its reason."""


TRACE: list[dict[str, Any]] = [
    {"timestamp": 0, "input_length": 60, "output_length": 4, "hash_ids": [0, 1, 2]},
    {"timestamp": 400, "input_length": 70, "output_length": 8, "hash_ids": [0, 1, 3]},
    {"timestamp": 900, "input_length": 40, "output_length": 6, "hash_ids": [4, 5]},
    {"timestamp": 1500, "input_length": 90, "output_length": 4, "hash_ids": [0, 1, 6, 7]},
    {"timestamp": 2600, "input_length": 30, "output_length": 12, "hash_ids": [4]},
]
"""A Mooncake-format trace (ms, lengths, prefix hash_ids), replayed at half its time scale."""
TRACE_TIME_SCALE = 0.5


TRACED_APIS = {"chat": "traced", "completions": "traced_completions"}
"""The trace's branch per API (its stages' prefix): the prompts' count_as left unset, so it
follows the api; one pipeline, so one worker builds both (each query goes to both entries)."""


def traced_branch(api: str) -> list[dict[str, Any]]:
    """Prompts built to the trace's input length as `api` counts it, their hash_ids as shared
    8-token blocks, asking for the trace's output length over `api`."""
    name = TRACED_APIS[api]
    return [
        {
            "id": f"{name}_prompts",
            "type": "dataset.synthetic_prompts",
            "config": {"hash_block_tokens": 8},
            "outputs": [f"{name}_llm"],
        },
        {
            "id": f"{name}_llm",
            "type": "http.openai",
            "config": {"service": "llm", "api": api, "enforce_output": "generation_config"},
        },
    ]


def traced_pipeline(trace: Path) -> dict[str, Any]:
    """The trace replayed against the same server, over the chat and the completions API."""
    loadgen: dict[str, Any] = {"type": "trace", "trace": str(trace), "trace_format": "mooncake"}
    loadgen |= {"trace_time_scale": TRACE_TIME_SCALE, "duration_s": 2, "timeout_s": 60}
    stages = [stage for api in TRACED_APIS for stage in traced_branch(api)]
    return {"name": "traced", "loadgen": loadgen, "stages": stages}


SESSION_PIPELINE = {
    "name": "sessions",
    "loadgen": {"type": "closed_loop", "concurrency": 1, "duration_s": 4, "timeout_s": 60},
    "stages": [
        {
            "id": "session_prompts",
            "type": "dataset.synthetic_prompts",
            "config": {
                "input_tokens": 30,
                "output_tokens": 4,
                "session": {"turns": 3, "think_time_ms": 50},
            },
            "outputs": ["session_llm"],
        },
        {
            "id": "session_llm",
            "type": "http.openai",
            "config": {"service": "llm", "api": "chat", "enforce_output": "generation_config"},
        },
    ],
}
"""3-turn sessions as the unit of a closed loop, against the same server."""


def served_doc(trace: Path) -> dict[str, Any]:
    return {
        "name": "served-real",
        "seed": 0,
        "repeats": 2,
        "collocation": {"solo_baselines": False},
        "telemetry": {"host": {"period_ms": 100}},
        "services": [
            {
                "name": "llm",
                "type": "transformers.serve",
                "model": {"artifact": "tiny_lm"},
                "ready": {"timeout_s": 180},
                "warmup_requests": 2,
            }
        ],
        "pipelines": [
            {
                "name": "chat",
                "loadgen": {
                    "type": "server",
                    "rate": 8,
                    "duration_s": 6,
                    "warmup_queries": 2,
                    "timeout_s": 60,
                    "ttft_slo_ms": 2000,
                    "tpot_slo_ms": 250,
                },
                "stages": [
                    {"id": "prompts", "type": "dataset.prompts", "outputs": ["llm"]},
                    {
                        "id": "llm",
                        "type": "http.openai",
                        "config": {
                            "service": "llm",
                            "api": "chat",
                            "max_tokens": 8,
                            "max_in_flight": 8,
                            "timeout_s": 30,
                        },
                    },
                ],
            },
            SHAPED_PIPELINE,
            traced_pipeline(trace),
            SESSION_PIPELINE,
        ],
    }


def server_processes() -> list[psutil.Process]:
    """Running `transformers serve` processes started from this test process."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if "serve" in process.cmdline() and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            pass
    return found


class KillInSecondTrial:
    """A progress callback that kills the server's process group once the second trial has
    measured queries done (so the trial has rows from before the kill)."""

    def __init__(self) -> None:
        self.killed_pid: int | None = None
        self.server_pid: int | None = None

    def __call__(self, event: ProgressEvent) -> None:
        if event.kind == "phase_start" and event.trial == 0 and self.server_pid is None:
            (server,) = server_processes()
            self.server_pid = server.pid
        measured = event.data.get("measured", 0) if event.kind == "progress" else 0
        if event.trial == 1 and measured >= KILL_AFTER_MEASURED and self.killed_pid is None:
            assert self.server_pid is not None
            self.killed_pid = self.server_pid
            os.killpg(os.getpgid(self.server_pid), signal.SIGKILL)


@pytest.fixture(scope="module")
def served_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, KillInSecondTrial]:
    tmp_path = tmp_path_factory.mktemp("served")
    trace = settings.home() / "traces" / "mooncake.jsonl"  # inside the allowed roots
    trace.parent.mkdir(parents=True, exist_ok=True)
    trace.write_text("".join(json.dumps(record) + "\n" for record in TRACE))
    killer = KillInSecondTrial()
    started = time.monotonic()
    result = run(served_doc(trace), tmp_path, progress=killer)
    elapsed_s = time.monotonic() - started
    db = tmp_path / "results.duckdb"
    load_runs([result.run_dir], db)
    print(f"served run: {elapsed_s:.1f} s")
    return result, db, killer


def query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(db), read_only=True) as connection:
        return connection.execute(sql).fetchall()


def test_the_first_trial_measures_the_served_model(served_run: Any) -> None:
    result, db, _ = served_run
    first = next(o for o in result.results if o.trial == 0 and o.pipeline == "chat")
    assert first.status == "ok", (first.error, result.warnings)
    # More than one request in flight: some visits of the stage overlap.
    (overlapping,) = query(
        db,
        "SELECT count(*) FROM stage_events a JOIN stage_events b ON a.trial = b.trial "
        "AND a.stage = b.stage AND a.query_id < b.query_id AND b.started_ns < a.finished_ns "
        "AND a.started_ns < b.finished_ns WHERE a.trial = 0 AND a.stage = 'llm'",
    )[0]
    assert overlapping > 0
    ((max_in_flight,),) = query(
        db,
        "SELECT max(in_flight_max) FROM stage_concurrency((SELECT max(run_id) FROM runs)) "
        "WHERE trial = 0 AND stage = 'llm'",
    )
    assert max_in_flight > 1
    ((ttft_p50, tokens, itl_p50),) = query(
        db, "SELECT ttft_p50_ms, tokens, itl_p50_ms FROM tokens WHERE trial = 0 AND stage = 'llm'"
    )
    assert ttft_p50 > 0 and tokens > 0 and itl_p50 is not None and itl_p50 >= 0
    ((token_rows, visits),) = query(
        db,
        "SELECT count(*), count(DISTINCT query_id) FROM token_events WHERE trial = 0 "
        "AND stage = 'llm'",
    )
    assert token_rows > visits > 0
    ((goodput_share,),) = query(
        db, "SELECT goodput_share FROM token_goodput WHERE trial = 0 AND pipeline = 'chat'"
    )
    assert goodput_share is not None and 0 <= goodput_share <= 1
    environment = read_manifest(result.run_dir).environment
    assert environment is not None  # the server's program, for comparing runs
    assert environment.server_programs == {"transformers": metadata.version("transformers")}


def test_the_server_process_is_in_the_host_samples(served_run: Any) -> None:
    _, db, killer = served_run
    sampled = {
        pid
        for (pid,) in query(
            db, "SELECT DISTINCT pid FROM host_samples WHERE scope = 'service' AND trial = 0"
        )
    }
    assert killer.server_pid in sampled


def test_a_killed_server_fails_its_pipeline_and_keeps_its_rows(served_run: Any) -> None:
    result, db, killer = served_run
    assert killer.killed_pid is not None
    second = next(o for o in result.results if o.trial == 1 and o.pipeline == "chat")
    assert second.status == "failed"
    assert second.error is not None and "service llm killed by signal 9" in second.error
    ((ok_before_kill,),) = query(
        db, "SELECT count(*) FROM queries WHERE trial = 1 AND status = 'ok'"
    )
    assert ok_before_kill > 0
    assert server_processes() == []
    assert not psutil.pid_exists(killer.killed_pid) or (
        psutil.Process(killer.killed_pid).status() == psutil.STATUS_ZOMBIE
    )


def test_requests_built_for_128_input_tokens_arrive_as_128(served_run: Any) -> None:
    result, db, _ = served_run
    shaped = next(o for o in result.results if o.trial == 0 and o.pipeline == "shaped")
    errors = query(db, "SELECT error, count FROM errors WHERE trial = 0 AND pipeline = 'shaped'")
    assert shaped.status == "ok" and errors == [], (shaped.error, errors)
    events = query(
        db,
        "SELECT status, prompt_tokens, tokens FROM stage_events WHERE trial = 0 "
        "AND stage = 'shaped_llm'",
    )
    assert len(events) >= 4
    # The server's own usage.prompt_tokens: the chat template's tokens are counted in the 128.
    assert {(status, prompt) for status, prompt, _ in events} == {("ok", SHAPED_INPUT_TOKENS)}
    # Output lengths enforced (generation_config): each is one the distribution can draw.
    outputs = {tokens for _, _, tokens in events}
    assert outputs <= set(SHAPED_OUTPUT_TOKENS["values"]) and len(outputs) == 2, outputs


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_a_mooncake_trace_is_replayed_with_its_offsets_and_lengths(
    served_run: Any, api: str
) -> None:
    """Arrivals at the trace's offsets (scaled), each request arriving at the server with the
    trace's input length (its usage.prompt_tokens) and answering its output length, over
    either API with `count_as` left unset: counted for the chat template and sent to
    /v1/completions, every prompt arrived 20 tokens short, unchecked (issue 42)."""
    result, db, _ = served_run
    traced = next(o for o in result.results if o.trial == 0 and o.pipeline == "traced")
    assert traced.status == "ok", traced.error
    scheduled = query(
        db,
        "SELECT query_id, scheduled_ns - min(scheduled_ns) OVER () FROM queries "
        "WHERE trial = 0 AND pipeline = 'traced' ORDER BY query_id",
    )
    assert [offset for _, offset in scheduled] == [
        round(record["timestamp"] * TRACE_TIME_SCALE * 1e6) for record in TRACE
    ]
    events = query(
        db,
        "SELECT query_id, status, prompt_tokens, tokens FROM stage_events WHERE trial = 0 "
        f"AND stage = '{TRACED_APIS[api]}_llm' ORDER BY query_id",
    )
    assert events == [
        (index, "ok", record["input_length"], record["output_length"])
        for index, record in enumerate(TRACE)
    ]
    # every visit's count was checked against the server's: no stage warned it was not
    assert not [w for w in result.warnings if "not checked" in w], result.warnings


def test_sessions_carry_their_history_turn_by_turn(served_run: Any) -> None:
    """Each turn's request holds the conversation so far: the server's prompt_tokens grow by
    more than the answer before (4 tokens) turn by turn; TTFT is recorded per turn."""
    result, db, _ = served_run
    sessions = next(o for o in result.results if o.trial == 0 and o.pipeline == "sessions")
    assert sessions.status == "ok", sessions.error
    turns = query(
        db,
        "SELECT turn, sessions, ttft_p50_ms, prompt_tokens_mean, tokens_mean FROM sessions "
        "WHERE trial = 0 AND pipeline = 'sessions' ORDER BY turn",
    )
    assert [turn for turn, *_ in turns] == [0, 1, 2]
    assert all(count >= 1 and ttft > 0 and tokens == 4 for _, count, ttft, _, tokens in turns)
    prompts = [prompt for *_, prompt, _ in turns]
    assert prompts[0] == 30  # the first turn is token-exact
    assert prompts[1] - prompts[0] > 4 and prompts[2] - prompts[1] > 4

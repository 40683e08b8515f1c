"""Multi-turn sessions: `dataset.synthetic_prompts` with `session` builds a session's turns,
and `http.openai` sends them one after another with the history so far and the think time
between them, a `session_turns` row per turn (the scripted stub server stands in for one)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from stages.library.served.stream import OpenAIRequestError
from stages.library.served.synthetic_prompts import SyntheticPromptsConfig, SyntheticPromptsStage
from stages.runtime.query import Query
from stages.runtime.stage import StageContext
from tests.library.openai_calibration import make_query
from tests.library.openai_stub import Script, ThreadedStub
from tests.library.served.test_openai_http import make_stage as make_http_stage

THINK_MS = 60


def session_payload(turns: int = 3, seed: int = 0) -> dict[str, Any]:
    config = SyntheticPromptsConfig.model_validate(
        {"input_tokens": 40, "output_tokens": 5,
         "session": {"turns": turns, "think_time_ms": THINK_MS}}
    )  # fmt: skip
    stage = SyntheticPromptsStage(config, StageContext(stage_id="prompts", seed=seed))
    stage.prepare()
    query = Query(3, 0, stage_count=1)
    stage.run(query)
    assert isinstance(query.payload, dict)
    return query.payload


def test_a_session_payload_holds_its_turns() -> None:
    payload = session_payload()
    turns = payload["turns"]
    assert len(turns) == 3 and payload["think_time_ms"] == THINK_MS
    assert turns[0]["prompt"] == payload["prompt"]  # the first turn is the query's prompt
    assert len({turn["prompt"] for turn in turns}) == 3
    assert [turn["output_tokens"] for turn in turns] == [5, 5, 5]
    assert session_payload() == payload  # seeded: a rerun builds the same session


def test_each_turn_carries_the_history_and_waits_the_think_time() -> None:
    payload = session_payload()
    written: list[dict[str, Any]] = []
    # The stub counts 40 prompt tokens for every turn: the first turn's, checked, are exact.
    with ThreadedStub(Script(tokens=5, prompt_tokens=40)) as stub:
        stage = make_http_stage(written, base_url=stub.url, api="chat",
                                enforce_output="generation_config")  # fmt: skip
        query = make_query(payload=payload, visit=1)
        stage.run(query)
        bodies = stub.stats.bodies
    prompts = [turn["prompt"] for turn in payload["turns"]]
    assert [len(body["messages"]) for body in bodies] == [1, 3, 5]
    third = bodies[2]["messages"]
    assert [message["role"] for message in third] == ["user", "assistant"] * 2 + ["user"]
    assert [third[0]["content"], third[2]["content"], third[4]["content"]] == prompts
    assert third[1]["content"] and third[3]["content"]  # the answers the server gave
    assert [row["turn"] for row in written] == [0, 1, 2]
    assert all(row["sent_ns"] < row["first_token_ns"] <= row["finished_ns"] for row in written)
    for before, after in itertools.pairwise(written):
        assert after["sent_ns"] - before["finished_ns"] >= THINK_MS * 1_000_000
    assert (query.tokens, query.prompt_tokens, query.first_token_ns) == (15, 120, None)


def test_a_first_turn_counted_otherwise_than_asked_fails_the_session() -> None:
    """The first turn is the query's prompt alone: its input length is checked as a single
    request's is (the later turns carry the history, so only their output is)."""
    payload = session_payload()
    written: list[dict[str, Any]] = []
    with ThreadedStub(Script(tokens=5, prompt_tokens=50)) as stub:
        stage = make_http_stage(written, base_url=stub.url, api="chat",
                                enforce_output="generation_config")  # fmt: skip
        with pytest.raises(OpenAIRequestError, match="turn 1: asked 40 input tokens, the "
                           "server counted 50"):  # fmt: skip
            stage.run(make_query(payload=payload, visit=1))
    assert [row["turn"] for row in written] == [0]


def test_a_turn_that_fails_ends_the_session_and_keeps_the_turns_before() -> None:
    payload = session_payload()
    written: list[dict[str, Any]] = []
    with ThreadedStub(Script(tokens=4)) as stub:  # 4 tokens where 5 are enforced
        stage = make_http_stage(written, base_url=stub.url, api="chat",
                                enforce_output="generation_config")  # fmt: skip
        with pytest.raises(OpenAIRequestError, match="turn 1: asked 5 output tokens, got 4"):
            stage.run(make_query(payload=payload, visit=1))
    assert [row["turn"] for row in written] == [0]


def test_sessions_need_the_chat_api() -> None:
    with ThreadedStub(Script()) as stub:
        stage = make_http_stage(base_url=stub.url, api="completions")
        with pytest.raises(ValueError, match="use api: chat"):
            stage.run(make_query(payload=session_payload()))

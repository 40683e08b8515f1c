"""Multi-turn sessions for `http.openai` (chat API): a payload's `turns` (built by
`dataset.synthetic_prompts` with `session`) sent one after another on the stage's event loop,
each request carrying the conversation so far (every earlier user message and answer), with
the user's `think_time_ms` between an answer and the next turn. One query = one session, so a
closed loop's clients run sessions, and the query's latency is the session's duration.

Each turn is a row of `session_turns` (sent, first token, end, the server's prompt and answer
tokens); the visit's `stage_events` row keeps the sums (`tokens`, `prompt_tokens`) and no
`first_token_ns`: a session's think times would distort the `tokens` view's TPOT, so its
per-turn figures are the `sessions` view's.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from stages.library.served.request_shape import mismatch, output_fields
from stages.library.served.stream import OpenAIRequestError, StreamedCompletion, StreamError

if TYPE_CHECKING:
    from stages.library.served.openai_http import OpenAIStage
    from stages.runtime.query import Query

TABLE = "session_turns"


def session_turns(payload: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A payload's session turns (`turns`: a list of {prompt, output_tokens}), else None."""
    turns = payload.get("turns")
    return turns if isinstance(turns, list) and turns else None


async def run_session(
    stage: OpenAIStage, query: Query, payload: dict[str, Any], turns: list[dict[str, Any]]
) -> None:
    """Send every turn with the history so far, pausing `think_time_ms` between them; record
    a `session_turns` row per turn and the sums on the query. A failed turn fails the visit
    (the turns before it keep their rows)."""
    think_s = float(payload.get("think_time_ms") or 0.0) / 1000.0
    messages: list[dict[str, str]] = []
    rows: list[dict[str, Any]] = []
    visit = query.visits[stage.context.stage_index]
    try:
        for turn, shape in enumerate(turns):
            if turn and think_s:
                await asyncio.sleep(think_s)
            messages.append({"role": "user", "content": str(shape["prompt"])})
            completion, row = await _turn(stage, messages, shape.get("output_tokens"))
            rows.append({"query_id": query.query_id, "stage": stage.context.stage_id,
                         "visit": visit, "turn": turn, **row})  # fmt: skip
            messages.append({"role": "assistant", "content": "".join(completion.pieces)})
            _check_output(stage, shape.get("output_tokens"), row["tokens"], turn)
            if turn == 0:
                _check_first_input(stage, payload, row["prompt_tokens"])
    finally:
        if rows:
            stage.context.write_rows(TABLE, rows)
    query.tokens = sum(row["tokens"] or 0 for row in rows)
    prompts = [row["prompt_tokens"] for row in rows]
    query.prompt_tokens = sum(prompts) if None not in prompts else None
    payload["text"] = messages[-1]["content"]
    payload["new_tokens"] = query.tokens
    if not rows:
        raise OpenAIRequestError(f"{stage.url}: a session of no turns")


async def _turn(
    stage: OpenAIStage, messages: list[dict[str, str]], output_tokens: Any
) -> tuple[StreamedCompletion, dict[str, Any]]:
    """One turn's request and what its row records."""
    config = stage.config
    fields = dict(stage.request_fields)
    if isinstance(output_tokens, int) and output_tokens >= 1:
        fields.update(output_fields(output_tokens, config.enforce_output))
    fields["messages"] = messages
    completion = StreamedCompletion(True)
    sent_ns = time.monotonic_ns()
    try:
        async with asyncio.timeout(config.timeout_s):
            await stage.request(json.dumps(fields).encode(), completion)
    except TimeoutError:
        raise OpenAIRequestError(
            f"{stage.url}: turn {len(messages) // 2 + 1}: no complete response within "
            f"timeout_s {config.timeout_s:g}"
        ) from None
    except (StreamError, OSError) as error:
        raise OpenAIRequestError(stage.reason(error)) from None
    arrivals = completion.arrivals_ns
    row = {
        "sent_ns": sent_ns,
        "first_token_ns": arrivals[0] if arrivals else None,
        "finished_ns": time.monotonic_ns(),
        "prompt_tokens": completion.usage_prompt_tokens,
        "tokens": completion.tokens if config.stream else completion.usage_tokens,
    }
    return completion, row


def _check_output(stage: OpenAIStage, asked: Any, tokens: int | None, turn: int) -> None:
    """An enforced output length that did not arrive fails the session (on_token_mismatch)."""
    config = stage.config
    if config.enforce_output == "off" or config.on_token_mismatch != "fail":
        return
    wanted = asked if isinstance(asked, int) else config.max_tokens
    if tokens != wanted:
        raise OpenAIRequestError(
            f"{stage.url}: turn {turn + 1}: asked {wanted} output tokens, got {tokens}"
        )


def _check_first_input(stage: OpenAIStage, payload: dict[str, Any], prompt_tokens: Any) -> None:
    """The first turn is the payload's prompt alone: its `input_tokens` are checked against
    the server's count as a single request's are (on_token_mismatch)."""
    if stage.config.on_token_mismatch != "fail":
        return
    stage.warn_unchecked(payload)
    if (problem := mismatch(payload, "chat", None, prompt_tokens, None)) is not None:
        raise OpenAIRequestError(f"{stage.url}: turn 1: {problem}")

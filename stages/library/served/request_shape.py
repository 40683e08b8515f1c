"""A request's shape for `http.openai`: the output length a payload asks for (written by
`dataset.synthetic_prompts`, or a trace), the fields that make a server generate exactly that
many tokens, and the check of what the server's `usage` says arrived against what was asked.

Payload fields read: `output_tokens` (the output length to ask for), `input_tokens` with
`counted_as` (the input length as the builder counted it: `chat`, `completions` or `text`).
"""

from __future__ import annotations

import json
from typing import Any, Literal

EnforceOutput = Literal["off", "min_tokens", "generation_config"]
TokenMismatch = Literal["fail", "record"]


def asked_output(payload: dict[str, Any]) -> int | None:
    """The output tokens a payload asks for (`output_tokens`, a positive int), else None."""
    value = payload.get("output_tokens")
    valid = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    return value if valid else None


def output_fields(max_tokens: int, enforce: EnforceOutput) -> dict[str, Any]:
    """The request fields asking for exactly `max_tokens` output tokens: `max_tokens` caps
    them; `min_tokens` + `ignore_eos` (vLLM, SGLang) or a `generation_config` with
    `min_new_tokens` (`transformers serve`, which refuses unknown fields) keep the model from
    stopping before."""
    fields: dict[str, Any] = {"max_tokens": max_tokens}
    if enforce == "min_tokens":
        fields.update(min_tokens=max_tokens, ignore_eos=True)
    elif enforce == "generation_config":
        exact = {"max_new_tokens": max_tokens, "min_new_tokens": max_tokens}
        fields["generation_config"] = json.dumps(exact)
    return fields


def counted_for(api: str) -> str:
    """The `counted_as` whose count a server's `usage.prompt_tokens` is, over `api`."""
    return "chat" if api == "chat" else "completions"


def unchecked_input(payload: dict[str, Any], api: str) -> str | None:
    """Why a payload's `input_tokens` cannot be checked against the server's count over
    `api` (counted for another API, or it does not say for which), on one line; None when it
    can be, or when it carries none. The same text for every such visit (it is counted)."""
    asked_in, counted_as = payload.get("input_tokens"), payload.get("counted_as")
    if not isinstance(asked_in, int) or counted_as == counted_for(api):
        return None
    how = f"counted as {counted_as}" if isinstance(counted_as, str) else "with no counted_as"
    return (
        f"input_tokens {how}, not as api {api} counts them: not checked against the "
        "server's prompt_tokens"
    )


def mismatch(
    payload: dict[str, Any],
    api: str,
    enforced_output: int | None,
    prompt_tokens: int | None,
    output_tokens: int | None,
) -> str | None:
    """What arrived differently from what was asked, on one line, or None: the server's
    `usage.prompt_tokens` against the payload's `input_tokens` (when they were counted for
    this API: `chat` for api chat, `completions` for api completions; otherwise
    `unchecked_input` says why not), and its completion tokens against `enforced_output`
    (only when the output length was enforced)."""
    problems = []
    asked_in = payload.get("input_tokens")
    if isinstance(asked_in, int) and payload.get("counted_as") == counted_for(api):
        if prompt_tokens is None:
            problems.append(f"asked {asked_in} input tokens, the server reported no prompt_tokens")
        elif prompt_tokens != asked_in:
            problems.append(f"asked {asked_in} input tokens, the server counted {prompt_tokens}")
    if enforced_output is not None and output_tokens != enforced_output:
        problems.append(f"asked {enforced_output} output tokens, got {output_tokens}")
    return "; ".join(problems) or None

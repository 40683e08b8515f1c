"""`dataset.synthetic_prompts`: prompts of an exact input token count, built with the served
model's own tokenizer, each carrying the output length to ask for: requests shaped as a
deployment's are (AIPerf's and vLLM bench's synthetic input), seeded so reruns repeat.

transformers is imported in `prepare()`: specs validate without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field

from stages.library.served.exact_prompts import CountAs, PromptBuilder, PromptLengthError
from stages.library.served.token_lengths import TokenLength, query_rng, sample_length
from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage, StageConfig
from stages.spec.base import StrictModel
from stages.spec.model_entry import ModelEntry

LOCAL_TOKENIZER = "tiny_lm"
UNBOUNDED_MAX_LENGTH = 10_000_000
"""A tokenizer's `model_max_length` at or above this is transformers' "no limit" sentinel."""
MAX_REPORTED_ROWS = 5
"""Trace rows named when a trace asks too much (the first ones; the rest alike)."""
UNSENT_COUNT_AS: CountAs = "chat"
"""`count_as` when no stage downstream sends the prompts to a server (the old default)."""
SERVER_COUNTS: dict[str, str] = {
    "chat": "the user message through the chat template",
    "completions": "the text with the tokenizer's special tokens",
}
"""What a server's `usage.prompt_tokens` counts, per API: the `count_as` that matches it."""
TRACE_FIELDS = ("input_tokens", "output_tokens")
"""Payload fields (or query attributes) of a trace's request shape: when present they win."""


def _tokenizer_reference(value: str | ModelEntry) -> str | ModelEntry:
    if isinstance(value, ModelEntry):
        if value.format != "hf_folder":
            raise ValueError(
                f"a tokenizer entry is a Hugging Face folder (`path`), not {value.format}"
            )
        return value
    if value != LOCAL_TOKENIZER:
        raise ValueError(
            f"unknown tokenizer '{value}': use {LOCAL_TOKENIZER} or {{path: <folder>}}"
        )
    return value


class SharedPrefixes(StrictModel):
    """A pool of prefixes (a system prompt, a document) that requests share, so a server's
    prefix cache sees the reuse a deployment has."""

    count: int = Field(..., ge=1, le=100_000, description="Distinct prefixes in the pool.")
    tokens: int = Field(..., ge=1, description="Tokens of each prefix (words of one token).")
    share: float = Field(
        1.0,
        ge=0,
        le=1,
        description="The share of requests that start with a prefix of the pool (drawn "
        "uniformly, seeded per query); the rest have none.",
    )


class SessionShape(StrictModel):
    """Multi-turn conversations: each query is a session of `turns` requests, each turn's
    request carrying the conversation so far (`http.openai`, chat API)."""

    turns: int = Field(..., ge=1, le=100, description="Turns (requests) per session.")
    think_time_ms: float = Field(
        0.0,
        ge=0,
        le=3_600_000,
        description="The user's pause between an answer and the next turn's request.",
    )


class SyntheticPromptsConfig(StageConfig):
    model_entry_fields: ClassVar[tuple[str, ...]] = ("tokenizer",)
    tokenizer: Annotated[str | ModelEntry, AfterValidator(_tokenizer_reference)] = Field(
        LOCAL_TOKENIZER,
        description="The served model's tokenizer: `tiny_lm` (the artefact built here, as "
        "`transformers.serve` serves it) or a model entry `{path: DIR}` (a local Hugging Face "
        "folder with tokenizer files, loaded offline).",
    )
    input_tokens: TokenLength = Field(
        128,
        description="Input tokens per request, as `count_as` counts them: a number or a "
        "distribution ({distribution: normal|lognormal, mean, std}, {distribution: uniform, "
        "low, high}, {distribution: empirical, values, weights}).",
    )
    output_tokens: TokenLength = Field(
        16, description="Output tokens to ask for per request: a number or a distribution."
    )
    count_as: CountAs | None = Field(
        None,
        description="What the input count is exact for: chat (the user message through the "
        "chat template with the generation prompt, what /v1/chat/completions counts), "
        "completions (the text with the tokenizer's special tokens, what /v1/completions "
        "counts) or text (the text alone); null: the `api` of the http.openai stage that "
        "sends the prompts (set at validation; chat when none does). A value that "
        "contradicts that api is refused.",
    )
    shared_prefixes: SharedPrefixes | None = Field(
        None, description="A pool of prefixes requests share (null: every prompt its own)."
    )
    session: SessionShape | None = Field(
        None,
        description="Multi-turn sessions: {turns, think_time_ms}; each turn's new message is "
        "built and drawn as a first message would be (its own lengths per turn); null: one "
        "request per query.",
    )
    hash_block_tokens: int = Field(
        512,
        ge=1,
        description="Tokens of each prefix block a trace's Mooncake `hash_ids` name (Mooncake's "
        "traces use 512): requests naming the same id share that block, as in the trace.",
    )
    max_model_tokens: int | None = Field(
        None,
        ge=2,
        description="The model's context in tokens (input + output); null: from the folder's "
        "config (`max_position_embeddings`, `n_positions`) or tokenizer.",
    )

    @property
    def counted_as(self) -> CountAs:
        """What the count is exact for: `count_as`, else (a config built outside a spec)
        the default for prompts no stage sends."""
        return self.count_as or UNSENT_COUNT_AS

    def follow_prompt_apis(
        self, senders: Mapping[str, str]
    ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        """`count_as` set to the API the prompts are sent over (chat when no stage sends them);
        a `count_as` that differs, or senders over different APIs, refused: the server's
        `prompt_tokens` could not be the count asked for."""
        apis = sorted(set(senders.values()))
        if not apis:
            return {"count_as": self.counted_as}, []
        if len(apis) > 1 or apis[0] not in SERVER_COUNTS:
            named = ", ".join(f"'{stage}' (api {api})" for stage, api in sorted(senders.items()))
            problem = f"the prompts are sent by {named}: no count is exact for each"
            return {}, [("count_as", problem)]
        (api,) = apis
        if self.count_as not in (None, api):
            stages = ", ".join(f"'{stage}'" for stage in sorted(senders))
            problem = (
                f"{self.count_as}, but stage {stages} sends these prompts over api {api}, whose "
                f"server counts {SERVER_COUNTS[api]}: leave count_as unset or set {api}"
            )
            return {}, [("count_as", problem)]
        return {"count_as": api}, []

    def request_problems(self, shapes: Sequence[Mapping[str, Any] | None]) -> list[str]:
        """Trace rows asking more tokens (input + output) than the model's context holds."""
        context = self.max_model_tokens or _folder_context(self.tokenizer)
        if context is None:
            return []
        problems = []
        for row, shape in enumerate(shapes, 1):
            asked = sum(int((shape or {}).get(key) or 0) for key in TRACE_FIELDS)
            if asked > context:
                problems.append(
                    f"row {row}: asks {asked} tokens (input + output), beyond the model's "
                    f"context of {context}"
                )
        return problems[:MAX_REPORTED_ROWS]


def _folder_context(reference: str | ModelEntry) -> int | None:
    """The context a tokenizer's model folder declares in its config.json (None: it does not
    say); the tiny_lm artefact is built first when needed."""
    import json

    if isinstance(reference, ModelEntry):
        from stages.library.models.common import located

        folder = Path(located(reference).location)
    else:
        from stages.artifacts.registry import ensure_artifact

        folder = ensure_artifact(reference, {}).path
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    sizes = [config.get(name) for name in ("max_position_embeddings", "n_positions")]
    known = [size for size in sizes if isinstance(size, int) and size > 0]
    return min(known) if known else None


def _load(reference: str | ModelEntry) -> tuple[Any, Path]:
    """(tokenizer, its folder), offline."""
    from transformers import AutoTokenizer

    from stages.library.models.common import ModelFileError
    from stages.library.models.hf_folders import TOKENIZER_PROBE

    if isinstance(reference, ModelEntry):
        from stages.library.models.hf_folders import trust_remote_code

        folder, trust = Path(reference.location), trust_remote_code(reference)
    else:
        from stages.artifacts.registry import ensure_artifact

        folder, trust = ensure_artifact(reference, {}).path, False
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            folder, local_files_only=True, trust_remote_code=trust
        )
        # transformers builds an empty tokenizer from a config alone: refused here.
        if not tokenizer(TOKENIZER_PROBE, add_special_tokens=False)["input_ids"]:
            raise ValueError("the tokenizer is empty (no tokenizer files in the folder?)")
    except Exception as error:  # no tokenizer files, a broken config
        raise ModelFileError(f"{folder}: cannot load a tokenizer: {error}") from error
    return tokenizer, folder


def context_tokens(tokenizer: Any, folder: Path) -> int | None:
    """The model's context length from its config or tokenizer; None when neither says."""
    from transformers import AutoConfig

    limits = []
    try:
        config = AutoConfig.from_pretrained(folder, local_files_only=True)
    except Exception:  # a tokenizer-only folder: the tokenizer's limit alone
        config = None
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            limits.append(value)
    model_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(model_max, int) and 0 < model_max < UNBOUNDED_MAX_LENGTH:
        limits.append(model_max)
    return min(limits) if limits else None


def _trace_length(query: Query, field: str) -> int | None:
    """A trace's length for this query: a payload field or query attribute, else None."""
    payload = query.payload
    value = payload.get(field) if isinstance(payload, dict) else getattr(query, field, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class SyntheticPromptsStage(Stage[SyntheticPromptsConfig]):
    """Builds one prompt per query. ONE QUERY = one request: its input length (exact, as
    `count_as` counts) and output length are drawn from generators seeded by the pipeline
    seed and query id, clipped to [the fewest a prompt can take, the context - 1] and
    [1, context - input]; a trace's `input_tokens` / `output_tokens` on the query win, and one
    outside those bounds fails the visit. Payload out:
    `prompt`, `prompt_id` (the query id), `prefix_id` (the `shared_prefixes` entry it starts
    with, or None), `input_tokens`, `counted_as`, `text_tokens` (the text alone) and
    `output_tokens` (http.openai asks for exactly that many); with `session`, `turns` (each
    turn's `prompt` and `output_tokens`, the first the query's own) and `think_time_ms`. A
    trace's `hash_ids` become shared prefix blocks of `hash_block_tokens` each."""

    def prepare(self) -> None:
        from stages.runtime.pipeline import REPLICA_SEED_STRIDE

        tokenizer, folder = _load(self.config.tokenizer)
        self.builder = PromptBuilder(tokenizer, self.config.counted_as)
        context = self.config.max_model_tokens or context_tokens(tokenizer, folder)
        self.context_tokens = context if context is not None else UNBOUNDED_MAX_LENGTH
        if self.context_tokens <= self.builder.min_tokens:
            raise PromptLengthError(
                f"the context of {self.context_tokens} tokens has no room for a prompt of "
                f"{self.builder.min_tokens} and one output token"
            )
        # Every replica draws as replica 0 would: a query's prompt does not depend on which
        # thread built it.
        self.seed = self.context.seed - self.context.replica * REPLICA_SEED_STRIDE

    def lengths(self, query: Query) -> tuple[int, int]:
        """(input tokens, output tokens) of a query: drawn and clipped, or its trace's, which
        are taken as they are or refused (a trace's request is never silently reshaped)."""
        config, query_id, context = self.config, query.query_id, self.context_tokens
        asked_in = _trace_length(query, "input_tokens")
        if asked_in is None:
            rng = query_rng(self.seed, query_id, "input_tokens")
            input_tokens = sample_length(
                config.input_tokens, rng, self.builder.min_tokens, context - 1
            )
        else:
            input_tokens = self._fits(asked_in, self.builder.min_tokens, context - 1, "input")
        asked_out = _trace_length(query, "output_tokens")
        if asked_out is None:
            rng = query_rng(self.seed, query_id, "output_tokens")
            output_tokens = sample_length(config.output_tokens, rng, 1, context - input_tokens)
        else:
            output_tokens = self._fits(asked_out, 1, context - input_tokens, "output")
        return input_tokens, output_tokens

    def _fits(self, tokens: int, low: int, high: int, which: str) -> int:
        if not low <= tokens <= high:
            raise PromptLengthError(
                f"the trace asks {tokens} {which} tokens: this model takes {low} to {high} "
                f"(context {self.context_tokens}, count_as {self.config.counted_as})"
            )
        return tokens

    def prefix(self, query: Query) -> tuple[list[str], int | None]:
        """(the shared words a query's prompt starts with, the pool prefix it drew or None):
        a trace's `hash_ids` blocks, else a prefix of `shared_prefixes` for `share` of them.
        A block or prefix is drawn by a generator seeded by its id alone, so it is the same
        text in every prompt that holds it."""
        payload = query.payload
        hash_ids = payload.get("hash_ids") if isinstance(payload, dict) else None
        words = self.config.hash_block_tokens
        if hash_ids:
            blocks = (self.builder.block(words, query_rng(self.seed, i, "block")) for i in hash_ids)
            return [word for block in blocks for word in block], None
        pool = self.config.shared_prefixes
        if pool is None or query_rng(self.seed, query.query_id, "share").random() >= pool.share:
            return [], None
        chosen = query_rng(self.seed, query.query_id, "prefix").randrange(pool.count)
        return self.builder.block(pool.tokens, query_rng(self.seed, chosen, "pool")), chosen

    def session(self, query: Query, first: str, first_output: int) -> dict[str, Any]:
        """A session's turns: the first is the query's prompt; each later turn's message is
        drawn (its lengths, its words) from generators keyed by the query and the turn."""
        session = self.config.session
        assert session is not None
        turns = [{"prompt": first, "output_tokens": first_output}]
        for turn in range(1, session.turns):
            which = f"turn{turn}"
            rng = query_rng(self.seed, query.query_id, f"{which}:input_tokens")
            tokens = sample_length(self.config.input_tokens, rng, self.builder.min_tokens,
                                   self.context_tokens - 1)  # fmt: skip
            rng = query_rng(self.seed, query.query_id, f"{which}:output_tokens")
            output = sample_length(self.config.output_tokens, rng, 1, self.context_tokens - 1)
            text, _ = self.builder.build(tokens, query_rng(self.seed, query.query_id, which))
            turns.append({"prompt": text, "output_tokens": output})
        return {"turns": turns, "think_time_ms": session.think_time_ms}

    def run(self, query: Query) -> Route:
        input_tokens, output_tokens = self.lengths(query)
        rng = query_rng(self.seed, query.query_id, "words")
        prefix, prefix_id = self.prefix(query)
        text, text_tokens = self.builder.build(input_tokens, rng, prefix)
        carried = query.payload if isinstance(query.payload, dict) else {}
        if self.config.session is not None:
            carried = {**carried, **self.session(query, text, output_tokens)}
        query.payload = {
            **carried,
            "prefix_id": prefix_id,
            "prompt": text,
            "prompt_id": query.query_id,
            "input_tokens": input_tokens,
            "counted_as": self.config.counted_as,
            "text_tokens": text_tokens,
            "output_tokens": output_tokens,
        }
        return None

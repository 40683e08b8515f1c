"""Self-RAG control blocks: router, relevance grader, hallucination check and query rewriter.

With the small random-weight models of a benchmark, a model's "decision" means nothing, so each
block decides with a seeded function of the query instead: `decision_uniform(seed, stage id,
query id, visit[, item])` is a blake2b hash mapped to [0, 1). A spec therefore sets how often
each branch and each loop happens, and a rerun makes the same decisions for the same query ids
whatever the thread timing or arrival order (no shared RNG, no Python `hash()`). The seed is
the pipeline's stage seed (derived from the spec seed, the pipeline name and the trial), so a
trial's solo and collocated phases take the same paths and do the same work.

Each block can stand in for a small model's cost with `work_ms` (sleep or calibrated CPU work).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

from pydantic import Field, model_validator

from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage, StageConfig

_TWO_TO_64 = float(1 << 64)


def decision_uniform(
    seed: int, stage_id: str, query_id: int, visit: int, item: object = ""
) -> float:
    """A uniform number in [0, 1) that depends only on its arguments (blake2b, 64 bits)."""
    key = f"{seed}\x1f{stage_id}\x1f{query_id}\x1f{visit}\x1f{item}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / _TWO_TO_64


class BlockConfig(StageConfig):
    """Options every Self-RAG block shares: the stand-in cost of the small model it replaces."""

    work_ms: float = Field(
        0.0, ge=0, description="Stand-in cost per query of the model this block replaces."
    )
    work: Literal["sleep", "busy"] = Field(
        "sleep",
        description="sleep: wait (a model on an accelerator, the CPU is free); busy: CPU work "
        "calibrated like the builtin `busy` stage (holds the GIL).",
    )


BlockConfigT = TypeVar("BlockConfigT", bound=BlockConfig)


class _Block(Stage[BlockConfigT]):
    """Shared machinery: the decision function and the stand-in work."""

    def prepare(self) -> None:
        self._busy_iterations = 0
        if self.config.work == "busy" and self.config.work_ms:
            from stages.library.core.builtin import _work_loop, machine_calibration

            self._busy = _work_loop(False)
            rate = machine_calibration(self.context.cache_dir, False)
            self._busy_iterations = round(self.config.work_ms * rate)

    def _work(self) -> None:
        if self._busy_iterations:
            self._busy(self._busy_iterations)
        elif self.config.work_ms:
            self.context.stop_event.wait(self.config.work_ms / 1000.0)

    def _visit(self, query: Query) -> int:
        return query.visits[self.context.stage_index]

    def _uniform(self, query: Query, item: object = "") -> float:
        return decision_uniform(
            self.context.seed, self.context.stage_id, query.query_id, self._visit(query), item
        )


def _missing_outputs(named: dict[str, str | None], outputs: Sequence[str]) -> list[str]:
    return [
        f"{key} '{value}' must be listed in outputs"
        for key, value in named.items()
        if value is not None and value not in outputs
    ]


def _as_dict(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise TypeError(f"expected a dict payload, got {type(payload).__name__}")
    return payload


# --------------------------------------------------------------------------- route


class RouterConfig(BlockConfig):
    retrieve_probability: float = Field(
        0.5, ge=0, le=1, description="Share of queries sent to `retrieve_to`."
    )
    retrieve_to: str = Field("retrieve", description="Output id of the retrieval branch.")
    answer_to: str = Field("generate", description="Output id that answers without retrieval.")

    @model_validator(mode="after")
    def _distinct(self) -> RouterConfig:
        if self.retrieve_to == self.answer_to:
            raise ValueError("retrieve_to and answer_to must differ")
        return self


class RouterStage(_Block[RouterConfig]):
    """Self-RAG router: does this question need retrieval? ONE QUERY = one decision, to
    `retrieve_to` with `retrieve_probability`, else to `answer_to`. The payload passes on
    unchanged (by reference)."""

    @classmethod
    def check_outputs(cls, config: RouterConfig, outputs: Sequence[str]) -> list[str]:
        return _missing_outputs(
            {"retrieve_to": config.retrieve_to, "answer_to": config.answer_to}, outputs
        )

    def prepare(self) -> None:
        super().prepare()
        self._retrieve = (self.config.retrieve_to,)
        self._answer = (self.config.answer_to,)

    def run(self, query: Query) -> Route:
        self._work()
        if self._uniform(query) < self.config.retrieve_probability:
            return self._retrieve
        return self._answer


# --------------------------------------------------------------------------- grade


class GraderConfig(BlockConfig):
    relevance_probability: float = Field(
        0.7, ge=0, le=1, description="Chance that each retrieved document is judged relevant."
    )
    none_relevant_to: str | None = Field(
        None,
        description="Output to take when no document is relevant (e.g. the rewriter, or an "
        "answer without context); none = go on to the other outputs with an empty list.",
    )


class GraderStage(_Block[GraderConfig]):
    """Self-RAG relevance grader. ONE QUERY = one judgement per retrieved document (payload
    `documents`): each is relevant with `relevance_probability` (a seeded function of the query,
    visit and doc_id). Payload out: a new dict with only the relevant `documents` and
    `relevance` = {retrieved, relevant} counts."""

    @classmethod
    def check_outputs(cls, config: GraderConfig, outputs: Sequence[str]) -> list[str]:
        problems = _missing_outputs({"none_relevant_to": config.none_relevant_to}, outputs)
        if config.none_relevant_to is not None and len(outputs) < 2:
            problems.append("none_relevant_to needs another output for relevant documents")
        return problems

    def prepare(self) -> None:
        super().prepare()
        empty = self.config.none_relevant_to
        self._empty_route = (empty,) if empty else None
        self._forward = [name for name in self.context.outputs if name != empty]

    def run(self, query: Query) -> Route:
        self._work()
        payload = _as_dict(query.payload)
        retrieved = payload.get("documents") or []
        probability = self.config.relevance_probability
        relevant = [
            document
            for position, document in enumerate(retrieved)
            if self._uniform(query, _doc_key(document, position)) < probability
        ]
        query.payload = {
            **payload,
            "documents": relevant,
            "relevance": {"retrieved": len(retrieved), "relevant": len(relevant)},
        }
        if not relevant and self._empty_route is not None:
            return self._empty_route
        return self._forward if self._empty_route is not None else None


def _doc_key(document: Any, position: int) -> object:
    if isinstance(document, dict) and "doc_id" in document:
        return document["doc_id"]
    return f"#{position}"


# --------------------------------------------------------------------------- check


class HallucinationCheckConfig(BlockConfig):
    hallucination_probability: float = Field(
        0.2,
        ge=0,
        le=1,
        description="Chance that an answer is judged unsupported and the query loops back "
        "through `rewrite_to`.",
    )
    rewrite_to: str = Field("rewrite", description="Output id of the rewriter (the loop edge).")
    accept_to: str | None = Field(
        None, description="Output id for accepted answers; none = the query ends here."
    )
    max_attempts: int = Field(
        3,
        ge=1,
        description="Answers judged per query: the check accepts at this visit whatever the "
        "draw, so at most max_attempts - 1 rewrites. Set the loop stages' max_visits to at "
        "least this (the runtime fails a query that exceeds max_visits).",
    )

    @model_validator(mode="after")
    def _distinct(self) -> HallucinationCheckConfig:
        if self.accept_to is not None and self.accept_to == self.rewrite_to:
            raise ValueError("accept_to and rewrite_to must differ")
        return self


class HallucinationCheckStage(_Block[HallucinationCheckConfig]):
    """Self-RAG hallucination check. ONE QUERY = one judgement of the generated answer: with
    `hallucination_probability` it is unsupported and the query goes back to `rewrite_to`, else
    on to `accept_to` (or it ends). At visit `max_attempts` the answer is accepted whatever the
    draw, so every query ends `ok` after a bounded number of loops instead of failing at the
    runtime's max_visits. Payload out: a new dict with `attempts` (this visit) and `supported`."""

    @classmethod
    def check_outputs(cls, config: HallucinationCheckConfig, outputs: Sequence[str]) -> list[str]:
        return _missing_outputs(
            {"rewrite_to": config.rewrite_to, "accept_to": config.accept_to}, outputs
        )

    def prepare(self) -> None:
        super().prepare()
        self._rewrite = (self.config.rewrite_to,)
        self._accept: tuple[str, ...] = (self.config.accept_to,) if self.config.accept_to else ()

    def run(self, query: Query) -> Route:
        self._work()
        visit = self._visit(query)
        unsupported = (
            visit < self.config.max_attempts
            and self._uniform(query) < self.config.hallucination_probability
        )
        query.payload = {
            **_as_dict(query.payload),
            "attempts": visit,
            "supported": not unsupported,
        }
        return self._rewrite if unsupported else self._accept


# --------------------------------------------------------------------------- rewrite

DEFAULT_PHRASES = (
    "Answer using only facts stated in the retrieved documents.",
    "Be specific: name the mechanism and its measurable effect.",
    "Explain it step by step, citing the sources.",
)


class RewriterConfig(BlockConfig):
    text_field: str = Field("prompt", description="Payload field holding the question.")
    phrases: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PHRASES),
        min_length=1,
        description="Clarifying phrases; rewrite n appends phrases[(n - 1) % len(phrases)].",
    )
    drop_fields: list[str] = Field(
        default_factory=lambda: ["embedding", "documents", "relevance", "text", "new_tokens"],
        description="Payload fields derived from the old question (its embedding, documents, "
        "answer), dropped so the next round computes them again.",
    )


class RewriterStage(_Block[RewriterConfig]):
    """Self-RAG query rewriter. ONE QUERY = one deterministic rewrite of the question: the
    original (kept in `original_prompt`) plus the next clarifying phrase. Payload out: a new
    dict without the fields derived from the old question, with `rewrites` counted up; it goes
    back to retrieval or generation (its outputs)."""

    def run(self, query: Query) -> Route:
        self._work()
        payload = _as_dict(query.payload)
        field = self.config.text_field
        if field not in payload:
            raise KeyError(f"payload has no '{field}' field to rewrite")
        original = payload.get("original_prompt", payload[field])
        rewrites = int(payload.get("rewrites", 0)) + 1
        phrases = self.config.phrases
        dropped = set(self.config.drop_fields)
        rewritten = {key: value for key, value in payload.items() if key not in dropped}
        rewritten[field] = f"{original} {phrases[(rewrites - 1) % len(phrases)]}"
        rewritten["original_prompt"] = original
        rewritten["rewrites"] = rewrites
        query.payload = rewritten
        return None

"""The record that flows between stages: one per query, plus one per branch after a fork."""

from __future__ import annotations

from typing import Any

# Status codes on the hot path; strings only at flush time (see `STATUS_NAMES`).
OK = 0
ERROR = 1
DROPPED = 2
TIMEOUT = 3
NOT_ISSUED = 4  # scheduled inside the window, never issued (the load stopped first)
STATUS_NAMES = ("ok", "error", "dropped", "timeout", "not_issued")


class Query:
    """A query (or one branch of it). Payloads travel by reference; forks copy only this record.

    The first record of a query is its own `root`; branches point at it. Fields marked root-only
    are meaningful on the root: it counts the outstanding branches and holds the final status.
    """

    __slots__ = (
        "completed_ns",
        "correct",
        "enqueued_ns",
        "first_token_ns",
        "graded",
        "issued_ns",
        "loss",
        "outstanding",
        "payload",
        "prompt_tokens",
        "query_id",
        "root",
        "samples",
        "scheduled_ns",
        "source",
        "status",
        "tokens",
        "visits",
        "warmup",
    )

    def __init__(
        self,
        query_id: int,
        scheduled_ns: int,
        samples: int = 1,
        payload: Any = None,
        warmup: bool = False,
        stage_count: int = 0,
    ) -> None:
        self.query_id = query_id
        self.payload = payload
        self.samples = samples
        self.visits = [0] * stage_count
        self.enqueued_ns = 0
        self.source = -1  # index of the stage that sent this record; -1 = the load generator
        self.first_token_ns: int | None = None  # generation stages set these two
        self.tokens: int | None = None
        self.prompt_tokens: int | None = None  # a served model's count of the input tokens
        # A stage that knows the right answers sets these two: samples graded, samples right.
        self.graded: int | None = None
        self.correct: int | None = None
        self.loss: float | None = None  # a training stage: the step's loss
        self.root: Query = self
        # root-only
        self.scheduled_ns = scheduled_ns
        self.issued_ns = 0
        self.completed_ns = 0
        self.warmup = warmup
        self.status = OK
        self.outstanding = 1

    def branch(self) -> Query:
        """A new record for one branch of a fork: same query, own visits, shared payload."""
        twin = Query.__new__(Query)
        twin.query_id = self.query_id
        twin.payload = self.payload
        twin.samples = self.samples
        twin.visits = list(self.visits)
        twin.enqueued_ns = self.enqueued_ns
        twin.source = self.source
        twin.first_token_ns = None
        twin.tokens = twin.prompt_tokens = None
        twin.graded = twin.correct = None
        twin.loss = None
        twin.root = self.root
        return twin

"""`retrieval.fuse`: several retrievers' document lists, met at a join, fused into one
(reciprocal rank fusion, or their union)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from stages.library.retrieval.corpus import DOCUMENTS_FIELD
from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage, StageConfig


class FuseConfig(StageConfig):
    method: Literal["rrf", "union"] = Field(
        "rrf",
        description="rrf: reciprocal rank fusion, score = sum over retrievers of "
        "1 / (rrf_k + rank); union: each retriever's documents in turn, duplicates dropped.",
    )
    rrf_k: int = Field(60, ge=1, description="rrf: the rank offset (60 as in the RRF paper).")
    k: int | None = Field(None, ge=1, description="Keep at most this many fused documents.")


def _id_key(doc_id: Any) -> tuple[int, Any]:
    """Sort key of a doc_id: numbers by value, anything else by its text after them."""
    return (0, doc_id) if isinstance(doc_id, int | float) else (1, str(doc_id))


class FuseStage(Stage[FuseConfig]):
    """Merges the documents of several retrievers at a join (input_policy: join). ONE QUERY =
    the joined payload {input stage id: payload} -> one payload: the fields of the inputs (in
    input-id order, the first one's value kept on a clash) and `documents`, fused by doc_id.
    Inputs are taken in stage-id order, never arrival order, so the result is deterministic."""

    def run(self, query: Query) -> Route:
        joined = query.payload
        if not isinstance(joined, dict):
            raise TypeError(f"retrieval.fuse needs a join's payload, got {type(joined).__name__}")
        branches = [joined[name] for name in sorted(joined)]
        if not all(isinstance(branch, dict) for branch in branches):
            raise TypeError("retrieval.fuse: every joined input must carry a dict payload")
        merged: dict[str, Any] = {}
        for branch in reversed(branches):  # the first input's value wins on a clash
            merged.update(branch)
        lists: list[Sequence[dict[str, Any]]] = [b.get(DOCUMENTS_FIELD) or [] for b in branches]
        merged[DOCUMENTS_FIELD] = self._fuse(lists)
        query.payload = merged
        return None

    def _fuse(self, lists: list[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
        first_seen: dict[Any, dict[str, Any]] = {}
        fused_score: dict[Any, float] = {}
        for documents in lists:
            for rank, document in enumerate(documents, start=1):
                doc_id = document["doc_id"]
                first_seen.setdefault(doc_id, document)
                if self.config.method == "rrf":
                    fused_score[doc_id] = fused_score.get(doc_id, 0.0) + 1.0 / (
                        self.config.rrf_k + rank
                    )
        if self.config.method == "rrf":
            # Best fused score first; ties by doc_id, so the order is the same on every run.
            order = sorted(first_seen, key=lambda doc_id: (-fused_score[doc_id], _id_key(doc_id)))
            fused = [{**first_seen[d], "score": fused_score[d]} for d in order]
        else:
            fused = list(first_seen.values())
        return fused[: self.config.k] if self.config.k else fused

"""What the text stages share about payloads: the prompt field, a payload (or a join's branch
payloads) as one dict, and the text of a retrieved document."""

from __future__ import annotations

from typing import Any

PROMPT_FIELD = "prompt"


def as_dict(payload: Any, field: str) -> dict[str, Any]:
    """A payload as a new dict holding `field`: a bare string becomes {field: text}; a join's
    payload ({input stage id: branch payload}) is merged, first branch first, with the
    branches' `documents` lists put together (a retrieval fork feeding one generator)."""
    if isinstance(payload, str) or (
        isinstance(payload, list) and all(isinstance(item, str) for item in payload)
    ):
        return {field: payload}
    if not isinstance(payload, dict):
        raise TypeError(f"expected a dict payload with '{field}', got {type(payload).__name__}")
    if field in payload:
        return dict(payload)
    branches = [value for value in payload.values() if isinstance(value, dict)]
    if branches and len(branches) == len(payload):
        merged: dict[str, Any] = {}
        documents: list[Any] = []
        for branch in branches:
            documents.extend(branch.get("documents") or [])
            for key, value in branch.items():
                merged.setdefault(key, value)
        if documents:
            merged["documents"] = documents
        if field in merged:
            return merged
    raise KeyError(f"payload has no '{field}' field (keys: {', '.join(map(str, payload))})")


def prompt_texts(
    payload: dict[str, Any], text_field: str, use_documents: bool
) -> tuple[list[str], bool]:
    """The prompts a payload holds (`text_field`: a text or a list of texts) and whether it was
    a list; with `use_documents`, retrieved `documents` in the payload are put before each
    prompt as context (a RAG prompt)."""
    texts = payload[text_field]
    batched = isinstance(texts, list)
    texts = [str(text) for text in texts] if batched else [str(texts)]
    documents = payload.get("documents") if use_documents else None
    if documents:
        context = " ".join(document_text(doc) for doc in documents)
        texts = [f"Context: {context}\nQuestion: {text}\nAnswer:" for text in texts]
    return texts, batched


def document_text(document: Any) -> str:
    """The text of one retrieved document: a dict with `text`, a (doc_id, score, text) tuple,
    or a string."""
    if isinstance(document, dict):
        return str(document.get("text", ""))
    if isinstance(document, list | tuple) and document:
        return str(document[-1])
    return str(document)

"""What the retrieval stages share: the corpus a stage reads (`documents.parquet`, named as an
artefact or by path) and the payload fields documents travel in.

A corpus is a `documents.parquet` (`doc_id BIGINT, topic VARCHAR, text VARCHAR,
embedding FLOAT[384]`), named either as an artefact (`corpus: rag_corpus`, built on first use)
or by path (`corpus_path`). Documents travel in payloads as dicts `{doc_id, score, text}`.
No numpy or pyarrow import at module level: specs validate without them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator

from stages.runtime.stage import StageConfig

DOCUMENTS_FILE = "documents.parquet"
EMBEDDING_FIELD = "embedding"
DOCUMENTS_FIELD = "documents"


def _known_artifact(name: str) -> str:
    from stages.artifacts.registry import ARTIFACTS

    if name not in ARTIFACTS:
        raise ValueError(ARTIFACTS.unknown_message(name))
    return name


class CorpusConfig(StageConfig):
    """Where a retrieval stage's documents come from: an artefact or a Parquet file."""

    file_fields: ClassVar[tuple[str, ...]] = ("corpus_path",)

    corpus: str | None = Field(
        None,
        description="Artefact holding documents.parquet (e.g. rag_corpus), built on first use "
        "in prepare. Exactly one of corpus / corpus_path (retrieval.sql: or database).",
    )
    corpus_params: dict[str, Any] = Field(
        default_factory=dict,
        description="Recipe parameters of the corpus artefact (e.g. {size: 2000}); defaults "
        "for the rest.",
    )
    corpus_path: str | None = Field(
        None,
        description="Path to a documents.parquet (doc_id, text, embedding FLOAT[n], optional "
        "topic): your own corpus, or a test's.",
    )

    @field_validator("corpus")
    @classmethod
    def _corpus_is_an_artifact(cls, value: str | None) -> str | None:
        return None if value is None else _known_artifact(value)

    def corpus_sources(self) -> int:
        return (self.corpus is not None) + (self.corpus_path is not None)


def corpus_file(config: CorpusConfig) -> Path:
    """The documents.parquet a config names, building the artefact if needed (prepare only)."""
    if config.corpus_path is not None:
        path = Path(config.corpus_path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"corpus_path {path} does not exist")
        return path
    from stages.artifacts.registry import ensure_artifact

    assert config.corpus is not None
    built = ensure_artifact(config.corpus, config.corpus_params)
    path = built.path / DOCUMENTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"artefact {config.corpus} has no {DOCUMENTS_FILE}")
    return path


def as_vector(value: Any) -> Any:
    """A 1-D float32 numpy array from a numpy array, a list or a torch tensor (any device),
    without importing torch."""
    import numpy as np

    if hasattr(value, "detach"):  # a torch tensor: to host memory first
        value = value.detach().to("cpu").float().numpy()
    return np.asarray(value, dtype=np.float32)

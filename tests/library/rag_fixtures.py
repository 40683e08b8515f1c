"""Small corpora and stage builders shared by the retrieval and Self-RAG tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.runtime.query import Query
from stages.runtime.stage import Stage, StageContext

DIMENSIONS = 384
TOPICS = ("gpu memory", "batching", "quantization", "kv cache", "attention")


def write_corpus(folder: Path, size: int = 300, seed: int = 0) -> tuple[Path, np.ndarray]:
    """A documents.parquet of `size` random unit vectors (the rag_corpus contract) and its
    embedding matrix."""
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((size, DIMENSIONS)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    table = pa.table(
        {
            "doc_id": pa.array(np.arange(size) * 10 + 7, pa.int64()),
            "topic": pa.array([TOPICS[i % len(TOPICS)] for i in range(size)]),
            "text": pa.array([f"document {i} on {TOPICS[i % len(TOPICS)]}" for i in range(size)]),
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel()), DIMENSIONS),
        }
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "documents.parquet"
    pq.write_table(table, path)
    return path, matrix


def make_stage(
    stage_class: type[Stage],
    config: dict[str, Any],
    tmp_path: Path,
    *,
    seed: int = 0,
    outputs: tuple[str, ...] = (),
    stage_id: str = "stage",
) -> Stage:
    """A prepared stage outside a pipeline (its config validated as a spec would)."""
    stage = stage_class(
        stage_class.config_model.model_validate(config),
        StageContext(stage_id=stage_id, seed=seed, outputs=outputs, cache_dir=tmp_path / "cache"),
    )
    stage.prepare()
    return stage


def query_with(payload: Any, query_id: int = 0, visit: int = 1) -> Query:
    """A query record as the runtime hands it to a stage at index 0, on its `visit`-th visit."""
    query = Query(query_id, 0, payload=payload, stage_count=1)
    query.visits[0] = visit
    return query

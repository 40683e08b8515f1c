"""Vector index candidates for `retrieval.vector`: one-query top-k latency on one thread.

Exact search (a float32 matrix-vector product over the L2-normalised matrix, then a partial
sort) in numpy and torch, DuckDB's `array_cosine_similarity`, and, when importable, the ANN
libraries faiss (HNSW), hnswlib and usearch. Corpora are clustered unit vectors (topics plus
noise, like sentence embeddings), queries are noisy copies of documents. Prints one JSON line:
per corpus size and candidate, build seconds, one-query latency p50/p99 in microseconds and
recall@k against the exact answer.

    python -m perf.retrieval_index                      # sizes 2000 and 100000, k=5
    python -m perf.retrieval_index --sizes 2000 --queries 500

The ANN libraries are not dependencies of collobench; run the script in a throwaway venv
that has them (`pip install numpy duckdb faiss-cpu hnswlib usearch`) to include them.
"""

from __future__ import annotations

import os

# One thread for every library, set before any of them loads its thread pool.
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

DIMENSIONS = 384
TOPICS = 50


def corpus(size: int, seed: int) -> np.ndarray:
    """`size` unit vectors in TOPICS clusters (a sentence-embedding-like layout)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((TOPICS, DIMENSIONS)).astype(np.float32)
    vectors = centres[rng.integers(0, TOPICS, size)] + 0.8 * rng.standard_normal(
        (size, DIMENSIONS)
    ).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def queries(matrix: np.ndarray, count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 1)
    picked = matrix[rng.integers(0, len(matrix), count)]
    noisy = picked + 0.5 * rng.standard_normal(picked.shape).astype(np.float32) / np.sqrt(
        DIMENSIONS
    )
    return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)


Search = Callable[[np.ndarray], np.ndarray]


def exact_numpy(matrix: np.ndarray, k: int) -> Search:
    def search(query: np.ndarray) -> np.ndarray:
        scores = matrix @ query
        top = np.argpartition(scores, -k)[-k:]
        return top[np.argsort(-scores[top])]

    return search


def exact_torch(matrix: np.ndarray, k: int) -> Search:
    import torch

    torch.set_num_threads(1)
    tensor = torch.from_numpy(matrix)

    def search(query: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return torch.topk(tensor @ torch.from_numpy(query), k).indices.numpy()

    return search


def duckdb_cosine(matrix: np.ndarray, k: int) -> Search:
    import duckdb
    import pyarrow as pa

    connection = duckdb.connect()
    connection.execute("SET threads = 1")
    flat = pa.array(matrix.reshape(-1), type=pa.float32())
    table = pa.table(
        {
            "doc_id": pa.array(np.arange(len(matrix), dtype=np.int64)),
            "embedding": pa.FixedSizeListArray.from_arrays(flat, DIMENSIONS),
        }
    )
    connection.register("arrow_documents", table)
    connection.execute("CREATE TABLE documents AS SELECT * FROM arrow_documents")
    sql = (
        "SELECT doc_id FROM documents ORDER BY "
        f"array_cosine_similarity(embedding, $q::FLOAT[{DIMENSIONS}]) DESC LIMIT {k}"
    )

    def search(query: np.ndarray) -> np.ndarray:
        rows = connection.execute(sql, {"q": query.tolist()}).fetchall()
        return np.array([row[0] for row in rows])

    return search


def faiss_hnsw(matrix: np.ndarray, k: int) -> Search:
    import faiss

    faiss.omp_set_num_threads(1)
    index = faiss.IndexHNSWFlat(DIMENSIONS, 32, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 200
    index.add(matrix)
    index.hnsw.efSearch = 64

    def search(query: np.ndarray) -> np.ndarray:
        return index.search(query[None, :], k)[1][0]

    return search


def hnswlib_hnsw(matrix: np.ndarray, k: int) -> Search:
    import hnswlib

    index = hnswlib.Index(space="ip", dim=DIMENSIONS)
    index.init_index(max_elements=len(matrix), M=32, ef_construction=200, random_seed=0)
    index.set_num_threads(1)
    index.add_items(matrix, np.arange(len(matrix)))
    index.set_ef(64)

    def search(query: np.ndarray) -> np.ndarray:
        return index.knn_query(query, k=k)[0][0]

    return search


def usearch_hnsw(matrix: np.ndarray, k: int) -> Search:
    from usearch.index import Index

    index = Index(ndim=DIMENSIONS, metric="ip", dtype="f32", connectivity=32, expansion_add=200)
    index.add(np.arange(len(matrix)), matrix, threads=1)
    index.expansion_search = 64

    def search(query: np.ndarray) -> np.ndarray:
        return np.asarray(index.search(query, k, threads=1).keys)

    return search


CANDIDATES: dict[str, Callable[[np.ndarray, int], Search]] = {
    "numpy_exact": exact_numpy,
    "torch_exact": exact_torch,
    "duckdb_array_cosine": duckdb_cosine,
    "faiss_hnsw": faiss_hnsw,
    "hnswlib_hnsw": hnswlib_hnsw,
    "usearch_hnsw": usearch_hnsw,
}


def measure(
    name: str, matrix: np.ndarray, probes: np.ndarray, truth: list[set[int]], k: int
) -> dict[str, Any]:
    """Build `name`'s index, then time one search per probe; `truth[i]` is probe i's exact
    top-k (computed once per corpus, not once per candidate)."""
    started = time.perf_counter()
    try:
        search = CANDIDATES[name](matrix, k)
    except ImportError as error:
        return {"skipped": f"not installed: {error.name}"}
    build_s = time.perf_counter() - started
    for probe in probes[:20]:  # warm caches and lazy initialisation
        search(probe)
    latencies_us = []
    hits = 0
    for probe, exact in zip(probes, truth, strict=False):
        began = time.perf_counter_ns()
        found = search(probe)
        latencies_us.append((time.perf_counter_ns() - began) / 1e3)
        hits += len(set(found.tolist()) & exact)
    values = np.array(latencies_us)
    return {
        "build_s": round(build_s, 3),
        "p50_us": round(float(np.percentile(values, 50)), 1),
        "p99_us": round(float(np.percentile(values, 99)), 1),
        "recall_at_k": round(hits / (k * len(probes)), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 100_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES))
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    results: dict[str, Any] = {}
    for size in arguments.sizes:
        matrix = corpus(size, arguments.seed)
        probes = queries(matrix, arguments.queries, arguments.seed)
        exact = exact_numpy(matrix, arguments.k)
        truth = [set(exact(probe).tolist()) for probe in probes]
        results[str(size)] = {}
        for name in arguments.candidates:
            # DuckDB scans the table per query: fewer probes keep the large corpus quick.
            count = min(len(probes), 50) if name.startswith("duckdb") and size > 10_000 else None
            figures = measure(name, matrix, probes[:count], truth, arguments.k)
            results[str(size)][name] = figures
            print(f"[retrieval_index] {size} {name} {figures}", file=sys.stderr, flush=True)
    print(
        json.dumps(
            {
                "benchmark": "retrieval_index",
                "machine": platform.processor() or platform.machine(),
                "python": sys.version.split()[0],
                "threads": 1,
                "dimensions": DIMENSIONS,
                "k": arguments.k,
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()

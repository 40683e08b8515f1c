"""retrieval.vector (exact top-k), retrieval.sql (read-only, time and row limits) and
retrieval.fuse (reciprocal rank fusion at a join)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from stages.artifacts import registry
from stages.artifacts.store import ArtifactBuilder, ArtifactParams, BuiltArtifact
from stages.cli.app import app
from stages.library.retrieval.fuse import FuseStage
from stages.library.retrieval.sql import SqlRetrievalStage, SqlRowLimitError, SqlTimeoutError
from stages.library.retrieval.vector import VectorRetrievalStage
from tests.helpers import REPO
from tests.library.rag_fixtures import DIMENSIONS, make_stage, query_with, write_corpus


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, np.ndarray]:
    return write_corpus(tmp_path / "corpus")


def spec_with_stage(stage: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "retrieval",
        "pipelines": [
            {
                "name": "p",
                "loadgen": {"type": "closed_loop", "duration_s": 1, "timeout_s": 10},
                "stages": [stage],
            }
        ],
    }


def validate_lines(tmp_path: Path, stage: dict[str, Any]) -> tuple[int, list[str]]:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec_with_stage(stage)))
    result = CliRunner().invoke(app, ["validate", str(path)])
    return result.exit_code, result.output.strip().splitlines()


# --------------------------------------------------------------------------- vector


def test_vector_returns_the_true_top_k_best_first(
    tmp_path: Path, corpus: tuple[Path, np.ndarray]
) -> None:
    path, matrix = corpus
    doc_ids = np.arange(len(matrix)) * 10 + 7
    stage = make_stage(VectorRetrievalStage, {"corpus_path": str(path), "k": 7}, tmp_path)
    rng = np.random.default_rng(1)
    for number in range(40):
        vector = rng.standard_normal(DIMENSIONS).astype(np.float32)
        payload = {"prompt": "q", "prompt_id": number, "embedding": vector}
        query = query_with(payload)
        stage.run(query)
        reference = matrix @ (vector / np.linalg.norm(vector))
        expected = doc_ids[np.argsort(-reference, kind="stable")[:7]].tolist()
        documents = query.payload["documents"]
        assert [d["doc_id"] for d in documents] == expected
        assert [d["score"] for d in documents] == pytest.approx(
            sorted(reference, reverse=True)[:7], abs=1e-5
        )
        assert documents[0]["text"].startswith("document ")
        # A new dict: the upstream payload is untouched, the other fields are kept.
        assert "documents" not in payload
        assert query.payload["prompt_id"] == number


def test_vector_accepts_a_list_and_normalises_the_query(
    tmp_path: Path, corpus: tuple[Path, np.ndarray]
) -> None:
    path, matrix = corpus
    stage = make_stage(VectorRetrievalStage, {"corpus_path": str(path), "k": 1}, tmp_path)
    query = query_with({"embedding": (matrix[42] * 3.0).tolist()})
    stage.run(query)
    (best,) = query.payload["documents"]
    assert best["doc_id"] == 42 * 10 + 7
    assert best["score"] == pytest.approx(1.0, abs=1e-5)


def test_vector_min_score_drops_weak_matches(
    tmp_path: Path, corpus: tuple[Path, np.ndarray]
) -> None:
    path, matrix = corpus
    stage = make_stage(
        VectorRetrievalStage, {"corpus_path": str(path), "k": 5, "min_score": 0.5}, tmp_path
    )
    query = query_with({"embedding": matrix[3]})  # itself scores 1; random others ~N(0, 0.05)
    stage.run(query)
    assert [d["doc_id"] for d in query.payload["documents"]] == [37]
    unrelated = query_with({"embedding": -matrix[3]})
    stage.run(unrelated)
    assert unrelated.payload["documents"] == []


def test_vector_wrong_embedding_size_is_a_clear_error(
    tmp_path: Path, corpus: tuple[Path, np.ndarray]
) -> None:
    stage = make_stage(VectorRetrievalStage, {"corpus_path": str(corpus[0])}, tmp_path)
    with pytest.raises(ValueError, match="384-d vectors"):
        stage.run(query_with({"embedding": np.ones(10, np.float32)}))
    with pytest.raises(KeyError, match="embedding"):
        stage.run(query_with({"prompt": "no vector"}))


def test_vector_k_above_the_corpus_size_fails_at_prepare(tmp_path: Path) -> None:
    path, _ = write_corpus(tmp_path / "small", size=3)
    with pytest.raises(ValueError, match="k=5 exceeds the corpus's 3 documents"):
        make_stage(VectorRetrievalStage, {"corpus_path": str(path), "k": 5}, tmp_path)


class _FakeCorpusParams(ArtifactParams):
    size: int = 20


class _FakeCorpusBuilder(ArtifactBuilder):
    """A corpus artefact built by the test, to exercise `corpus:` without the real one."""

    name = "fake_corpus"
    params_model = _FakeCorpusParams

    def build(
        self, params: ArtifactParams, out_dir: Path, inputs: Mapping[str, BuiltArtifact]
    ) -> dict[str, Any]:
        assert isinstance(params, _FakeCorpusParams)
        write_corpus(out_dir, size=params.size)
        return {"size": params.size}


def _with_fake_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """The artefact registry, for this test, with `fake_corpus` beside the real artefacts."""
    with_fake = registry.ArtifactRegistry()
    for builder in (*registry.ARTIFACTS.entries().values(), _FakeCorpusBuilder()):
        with_fake.register(builder)
    monkeypatch.setattr(registry, "ARTIFACTS", with_fake)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"corpus_path": "x.parquet", "k": 0},
            "config.k: Input should be greater than or equal to 1",
        ),
        (
            {"corpus_path": "x.parquet", "corpus": "fake_corpus"},
            "config: give exactly one of `corpus` (an artefact) or `corpus_path`",
        ),
        ({"k": 3}, "config: give exactly one of `corpus` (an artefact) or `corpus_path`"),
        ({"corpus": "no_such_corpus"}, "config.corpus: unknown artefact 'no_such_corpus'"),
        ({"corpus_path": "x.parquet", "min_score": 2}, "config.min_score: Input should be less"),
        (
            {"corpus_path": "x.parquet", "corpus_params": {"size": 3}},
            "`corpus_params` need `corpus`",
        ),
    ],
)
def test_vector_bad_config_is_one_validation_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict[str, Any], message: str
) -> None:
    _with_fake_corpus(monkeypatch)
    code, lines = validate_lines(
        tmp_path, {"id": "r", "type": "retrieval.vector", "config": config}
    )
    assert code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{tmp_path / 'spec.yaml'}: pipelines[0].stages[0].config")
    assert message in lines[0], lines[0]


def test_vector_resolves_a_corpus_artifact_in_prepare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _with_fake_corpus(monkeypatch)
    stage = make_stage(
        VectorRetrievalStage,
        {"corpus": "fake_corpus", "corpus_params": {"size": 12}, "k": 12},
        tmp_path,
    )
    query = query_with({"embedding": np.ones(DIMENSIONS, np.float32)})
    stage.run(query)
    assert len(query.payload["documents"]) == 12


# --------------------------------------------------------------------------- sql


def sql_stage(tmp_path: Path, corpus_path: Path, **config: Any) -> SqlRetrievalStage:
    stage = make_stage(SqlRetrievalStage, {"corpus_path": str(corpus_path), **config}, tmp_path)
    assert isinstance(stage, SqlRetrievalStage)
    return stage


def test_sql_binds_named_and_positional_parameters(
    tmp_path: Path, corpus: tuple[Path, np.ndarray]
) -> None:
    path, _ = corpus
    named = sql_stage(
        tmp_path,
        path,
        sql="SELECT doc_id, text FROM documents WHERE contains(lower($prompt), topic) "
        "ORDER BY doc_id LIMIT 3",
        output_field="documents",
    )
    query = query_with({"prompt": "How does the KV cache grow?", "prompt_id": 1})
    named.run(query)
    assert query.payload["documents"] == [
        {"doc_id": 37, "text": "document 3 on kv cache"},
        {"doc_id": 87, "text": "document 8 on kv cache"},
        {"doc_id": 137, "text": "document 13 on kv cache"},
    ]
    assert query.payload["prompt_id"] == 1
    positional = sql_stage(
        tmp_path,
        path,
        sql="SELECT count(*) AS n FROM documents WHERE topic = ? AND doc_id < ?",
        parameters=["topic", "below"],
    )
    query = query_with({"topic": "batching", "below": np.int64(100)})
    positional.run(query)
    assert query.payload["rows"] == [{"n": 2}]  # doc ids 17 and 67
    named.close()
    positional.close()


def test_sql_can_rank_by_the_payload_embedding(
    tmp_path: Path, corpus: tuple[Path, np.ndarray]
) -> None:
    path, matrix = corpus
    stage = sql_stage(
        tmp_path,
        path,
        sql="SELECT doc_id FROM documents ORDER BY "
        "array_cosine_similarity(embedding, $embedding::FLOAT[384]) DESC LIMIT 1",
    )
    query = query_with({"embedding": matrix[9]})
    stage.run(query)
    assert query.payload["rows"] == [{"doc_id": 97}]
    stage.close()


WRITES = {
    "insert": "INSERT INTO documents VALUES (1, 't', 'x', NULL)",
    "update": "UPDATE documents SET text = 'x'",
    "delete": "DELETE FROM documents",
    "create": "CREATE TABLE stolen AS SELECT * FROM documents",
    "drop": "DROP TABLE documents",
    "alter": "ALTER TABLE documents ADD COLUMN x INT",
    "copy": "COPY documents TO '/tmp/stolen.csv'",
    "export": "EXPORT DATABASE '/tmp/stolen'",
    "attach": "ATTACH '/tmp/other.duckdb' AS other",
    "detach": "DETACH other",
    "install": "INSTALL vss",
    "load": "LOAD vss",
    "pragma": "PRAGMA enable_profiling",
    "set": "SET enable_external_access = true",
    "reset": "RESET threads",
    "call": "CALL checkpoint()",
    "checkpoint": "CHECKPOINT",
    "vacuum": "VACUUM",
    "transaction": "BEGIN TRANSACTION",
    "two statements": "SELECT 1; DROP TABLE documents",
}


@pytest.mark.spawns
def test_sql_writing_statements_are_refused_at_validation(tmp_path: Path) -> None:
    paths = []
    for label, sql in WRITES.items():
        stage = {
            "id": "lookup",
            "type": "retrieval.sql",
            "config": {"corpus_path": "documents.parquet", "sql": sql},
        }
        path = tmp_path / f"{label.replace(' ', '_')}.yaml"
        path.write_text(yaml.safe_dump(spec_with_stage(stage)))
        paths.append(path)
    completed = subprocess.run(
        [sys.executable, "-m", "stages.cli", "validate", *map(str, paths)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=120,
    )
    assert completed.returncode == 2, completed.stdout + completed.stderr
    assert "Traceback" not in completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == len(paths), lines  # one line per spec
    for path, line in zip(paths, lines, strict=True):
        assert line.startswith(f"{path}: pipelines[0].stages[0].config: sql: "), line
        assert "only one read-only SELECT is allowed" in line or "one statement" in line, line


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"sql": "SELECT 1"}, "give exactly one of `database`, `corpus` or `corpus_path`"),
        (
            {"sql": "SELECT 1", "database": "a.duckdb", "corpus_path": "b.parquet"},
            "give exactly one of `database`, `corpus` or `corpus_path`",
        ),
        ({"sql": "SELEC 1", "database": "a.duckdb"}, "sql: cannot parse"),
        ({"sql": "SELECT ?", "database": "a.duckdb"}, "1 positional parameter(s)"),
        (
            {"sql": "SELECT $x", "database": "a.duckdb", "parameters": ["x"]},
            "`$name` binds by name",
        ),
        ({"sql": "SELECT 1", "database": "a.duckdb", "timeout_ms": 0}, "greater than 0"),
    ],
)
def test_sql_bad_config_is_one_validation_line(
    tmp_path: Path, config: dict[str, Any], message: str
) -> None:
    code, lines = validate_lines(tmp_path, {"id": "s", "type": "retrieval.sql", "config": config})
    assert code == 2
    assert len(lines) == 1 and message in lines[0], lines


def _unchecked(tmp_path: Path, corpus_path: Path, sql: str) -> SqlRetrievalStage:
    """A stage whose statement skipped validation (as if it had slipped past the check)."""
    config = SqlRetrievalStage.config_model.model_construct(
        corpus=None,
        corpus_params={},
        corpus_path=str(corpus_path),
        database=None,
        sql=sql,
        parameters=None,
        max_rows=10,
        on_overflow="fail",
        timeout_ms=2000.0,
        threads=1,
        output_field="rows",
    )
    from stages.runtime.stage import StageContext

    stage = SqlRetrievalStage(config, StageContext(stage_id="s", cache_dir=tmp_path / "cache"))
    stage.prepare()
    return stage


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("INSERT INTO documents VALUES (1, 't', 'x', NULL)", "read-only"),
        ("CREATE TABLE stolen AS SELECT 1", "read-only"),
        ("SET enable_external_access = true", "locked"),
        ("ATTACH '/tmp/collobench-rag-other.duckdb' AS other", "disabled by configuration"),
        ("INSTALL vss", "disabled by configuration"),
        # A SELECT passes validation; it still cannot read other files.
        ("SELECT * FROM read_csv('/etc/hostname')", "disabled by configuration"),
    ],
)
def test_sql_cannot_write_or_escape_at_run_time(
    tmp_path: Path, corpus: tuple[Path, np.ndarray], sql: str, error: str
) -> None:
    stage = _unchecked(tmp_path, corpus[0], sql)
    with pytest.raises(duckdb.Error, match=error):
        stage.run(query_with({}))
    # The corpus is intact and the connection still answers.
    check = _unchecked(tmp_path, corpus[0], "SELECT count(*) AS n FROM documents")
    query = query_with({})
    check.run(query)
    assert query.payload["rows"] == [{"n": 300}]
    stage.close()
    check.close()


def test_sql_time_limit_interrupts_a_slow_statement(
    tmp_path: Path, corpus: tuple[Path, np.ndarray]
) -> None:
    stage = sql_stage(
        tmp_path,
        corpus[0],
        sql="SELECT count(*) AS n FROM range(100000) a, range(100000) b",  # 1e10 rows: minutes
        timeout_ms=200,
    )
    started = time.monotonic()
    with pytest.raises(SqlTimeoutError, match="timeout_ms=200"):
        stage.run(query_with({}))
    elapsed_s = time.monotonic() - started
    # at the 200 ms limit, not minutes later; 1.3 s of room for DuckDB's interrupt (ms here),
    # which a machine twice as slow keeps
    assert 0.19 <= elapsed_s < 1.5, elapsed_s
    # The connection is usable afterwards, and a quick statement is not interrupted.
    fast = sql_stage(tmp_path, corpus[0], sql="SELECT 42 AS answer", timeout_ms=200)
    for _ in range(3):
        query = query_with({})
        fast.run(query)
        assert query.payload["rows"] == [{"answer": 42}]
    time.sleep(0.3)  # past the last deadline: a stale timer must not hit the next statement
    query = query_with({})
    fast.run(query)
    assert query.payload["rows"] == [{"answer": 42}]
    stage.close()
    fast.close()


def test_sql_row_limit_fails_or_truncates(tmp_path: Path, corpus: tuple[Path, np.ndarray]) -> None:
    sql = "SELECT doc_id FROM documents ORDER BY doc_id"
    failing = sql_stage(tmp_path, corpus[0], sql=sql, max_rows=5)
    with pytest.raises(SqlRowLimitError, match="more than max_rows=5"):
        failing.run(query_with({}))
    truncating = sql_stage(tmp_path, corpus[0], sql=sql, max_rows=5, on_overflow="truncate")
    query = query_with({})
    truncating.run(query)
    assert [row["doc_id"] for row in query.payload["rows"]] == [7, 17, 27, 37, 47]
    assert query.payload["truncated"] is True
    exact = sql_stage(tmp_path, corpus[0], sql=sql + " LIMIT 5", max_rows=5)
    query = query_with({})
    exact.run(query)
    assert len(query.payload["rows"]) == 5 and "truncated" not in query.payload
    for stage in (failing, truncating, exact):
        stage.close()


def test_sql_on_a_database_file_and_a_missing_one(tmp_path: Path) -> None:
    database = tmp_path / "facts.duckdb"
    connection = duckdb.connect(str(database))
    connection.execute("CREATE TABLE facts AS SELECT range AS id FROM range(4)")
    connection.close()
    stage = make_stage(
        SqlRetrievalStage,
        {"database": str(database), "sql": "SELECT sum(id) AS s FROM facts"},
        tmp_path,
    )
    query = query_with(None)
    stage.run(query)
    assert query.payload == {"input": None, "rows": [{"s": 6}]}
    stage.close()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        make_stage(
            SqlRetrievalStage,
            {"database": str(tmp_path / "none.duckdb"), "sql": "SELECT 1"},
            tmp_path,
        )


# --------------------------------------------------------------------------- fuse


def test_fuse_ranks_by_reciprocal_rank_whatever_the_arrival_order(tmp_path: Path) -> None:
    vector = {
        "prompt": "q",
        "embedding": [1.0],
        "documents": [
            {"doc_id": 1, "score": 0.9, "text": "a"},
            {"doc_id": 2, "score": 0.8, "text": "b"},
            {"doc_id": 3, "score": 0.7, "text": "c"},
        ],
    }
    keyword = {"prompt": "q", "documents": [{"doc_id": 3, "text": "c"}, {"doc_id": 4, "text": "d"}]}
    stage = make_stage(FuseStage, {"k": 3}, tmp_path)
    outcomes = []
    for joined in ({"vector": vector, "keyword": keyword}, {"keyword": keyword, "vector": vector}):
        query = query_with(joined)
        stage.run(query)
        outcomes.append(query.payload)
    assert outcomes[0] == outcomes[1]
    fused = outcomes[0]["documents"]
    # Inputs in id order: keyword ranks 3, 4; vector ranks 1, 2, 3. Doc 3 is in both
    # (1/61 + 1/63), doc 1 first once (1/61), docs 2 and 4 second once (a tie: by doc_id).
    assert [d["doc_id"] for d in fused] == [3, 1, 2]
    assert fused[0]["score"] == pytest.approx(1 / 61 + 1 / 63)
    assert outcomes[0]["embedding"] == [1.0] and outcomes[0]["prompt"] == "q"
    union = make_stage(FuseStage, {"method": "union"}, tmp_path)
    query = query_with({"vector": vector, "keyword": keyword})
    union.run(query)
    assert [d["doc_id"] for d in query.payload["documents"]] == [3, 4, 1, 2]

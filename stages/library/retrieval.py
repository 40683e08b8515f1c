"""Retrieval stages: exact vector search (`retrieval.vector`), a read-only parameterised SQL
statement (`retrieval.sql`), and the fusion of several retrievers' results at a join
(`retrieval.fuse`).

A corpus is a `documents.parquet` (`doc_id BIGINT, topic VARCHAR, text VARCHAR,
embedding FLOAT[384]`), named either as an artefact (`corpus: rag_corpus`, built on first use)
or by path (`corpus_path`). Documents travel in payloads as dicts `{doc_id, score, text}`.

No numpy, pyarrow or duckdb import at module level: specs validate without them (the SQL
statement check imports duckdb inside the validator, which only runs when a spec uses it).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from stages.artifacts.store import locked
from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage, StageConfig

DOCUMENTS_FILE = "documents.parquet"
EMBEDDING_FIELD = "embedding"
DOCUMENTS_FIELD = "documents"


# --------------------------------------------------------------------------- corpus


def _known_artifact(name: str) -> str:
    from stages.artifacts.catalog import BUILDERS

    if name not in BUILDERS:
        known = ", ".join(sorted(BUILDERS)) or "none"
        raise ValueError(f"unknown artefact '{name}'; known: {known}")
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
    from stages.artifacts.catalog import ensure_artifact

    assert config.corpus is not None
    built = ensure_artifact(config.corpus, config.corpus_params)
    path = built.path / DOCUMENTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"artefact {config.corpus} has no {DOCUMENTS_FILE}")
    return path


def _as_vector(value: Any) -> Any:
    """A 1-D float32 numpy array from a numpy array, a list or a torch tensor (any device),
    without importing torch."""
    import numpy as np

    if hasattr(value, "detach"):  # a torch tensor: to host memory first
        value = value.detach().to("cpu").float().numpy()
    return np.asarray(value, dtype=np.float32)


# --------------------------------------------------------------------------- retrieval.vector


class VectorConfig(CorpusConfig):
    k: int = Field(5, ge=1, description="Documents returned per query (at most).")
    min_score: float | None = Field(
        None,
        ge=-1.0,
        le=1.0,
        description="Drop documents whose cosine similarity is below this (after top-k), so a "
        "query can return fewer than k; none = always k.",
    )
    embedding_field: str = Field(
        EMBEDDING_FIELD, description="Payload field holding the query's embedding."
    )

    @model_validator(mode="after")
    def _one_corpus(self) -> VectorConfig:
        if self.corpus_sources() != 1:
            raise ValueError("give exactly one of `corpus` (an artefact) or `corpus_path`")
        if self.corpus_params and self.corpus is None:
            raise ValueError("`corpus_params` need `corpus` (an artefact name)")
        return self


class VectorRetrievalStage(Stage[VectorConfig]):
    """Exact top-k cosine search over the corpus. ONE QUERY = one embedding (payload
    `embedding`, 1-D, length of the corpus's vectors) -> the k most similar documents, best
    first (ties by doc_id). Payload out: a new dict with the input's fields and `documents`
    (list of {doc_id, score, text}).

    The index is a float32 matrix of L2-normalised rows held in memory; a query is one
    matrix-vector product and a partial sort (numpy, on the stage's thread). On a 2,000 x 384
    corpus that is ~60 us on one core, as fast as an HNSW index, exact, with nothing to build
    (figures and the comparison with ANN libraries: README, "Retrieval and Self-RAG").
    """

    def prepare(self) -> None:
        import numpy as np
        import pyarrow.parquet as pq

        path = corpus_file(self.config)
        table = pq.read_table(path, columns=["doc_id", "text", EMBEDDING_FIELD])
        count = table.num_rows
        if self.config.k > count:
            raise ValueError(f"k={self.config.k} exceeds the corpus's {count} documents ({path})")
        flat = table.column(EMBEDDING_FIELD).combine_chunks()
        width = getattr(flat.type, "list_size", None)
        if width is None:  # a variable-length list column: every row must have the same size
            width = len(flat[0].values) if count else 0
        values = flat.flatten().to_numpy(zero_copy_only=False).astype(np.float32)
        if values.size != count * width:
            raise ValueError(f"{path}: embeddings are not all {width} long")
        matrix = values.reshape(count, width)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        # Normalised here as well, so a corpus that is not makes cosine scores all the same.
        self._matrix = np.ascontiguousarray(matrix / np.where(norms == 0, 1, norms))
        self._doc_ids = table.column("doc_id").to_pylist()
        self._texts = table.column("text").to_pylist()
        self._np = np

    def run(self, query: Query) -> Route:
        np = self._np
        payload = query.payload
        if not isinstance(payload, dict) or self.config.embedding_field not in payload:
            raise KeyError(f"payload has no '{self.config.embedding_field}' field")
        vector = _as_vector(payload[self.config.embedding_field])
        if vector.shape != (self._matrix.shape[1],):
            raise ValueError(
                f"embedding of shape {vector.shape}, the corpus has {self._matrix.shape[1]}-d "
                "vectors (one 1-D embedding per query)"
            )
        norm = float(np.linalg.norm(vector))
        scores = self._matrix @ (vector / norm if norm else vector)
        k = self.config.k
        top = np.argpartition(scores, -k)[-k:] if k < scores.size else np.arange(scores.size)
        # Best first; equal scores by position, so the order never depends on the partition.
        top = top[np.lexsort((top, -scores[top]))]
        floor = self.config.min_score
        documents = [
            {"doc_id": self._doc_ids[i], "score": float(scores[i]), "text": self._texts[i]}
            for i in top.tolist()
            if floor is None or scores[i] >= floor
        ]
        query.payload = {**payload, DOCUMENTS_FIELD: documents}
        return None


# --------------------------------------------------------------------------- retrieval.sql

READ_ONLY_STATEMENTS = ("SELECT",)
"""Statement kinds `retrieval.sql` runs: SELECT only (WITH ... SELECT, VALUES, FROM t, DESCRIBE
and SUMMARIZE parse as SELECT too). Everything else is refused at validation: INSERT, UPDATE,
DELETE, CREATE, DROP, ALTER, COPY, EXPORT, ATTACH, DETACH, INSTALL/LOAD, PRAGMA, SET/RESET/USE,
CALL, PREPARE/EXECUTE, transactions, VACUUM..."""


def parse_statement(sql: str) -> tuple[str, set[str]]:
    """The kind of the one statement in `sql` and its parameter names ('1', '2'... for `?` and
    `$1`; names for `$name`). Raises ValueError with a one-line reason."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as error:
        raise ValueError(f"sql: cannot parse: {str(error).splitlines()[0]}") from None
    if len(statements) != 1:
        raise ValueError(f"sql: one statement expected, got {len(statements)}")
    statement = statements[0]
    kind = statement.type.name
    return kind, set(statement.named_parameters)


class SqlConfig(CorpusConfig):
    file_fields: ClassVar[tuple[str, ...]] = ("corpus_path", "database")

    database: str | None = Field(
        None,
        description="A DuckDB database file, opened read-only. Exactly one of database / "
        "corpus / corpus_path (the corpus ones expose the documents as table `documents`).",
    )
    sql: str = Field(
        description="One SELECT statement. Parameters: `$name` binds the payload field `name`; "
        "`?` or `$1, $2...` bind the payload fields listed in `parameters`, in order."
    )
    parameters: list[str] | None = Field(
        None,
        description="Payload fields bound to positional parameters (`?`, `$1`...), in order.",
    )
    max_rows: int = Field(
        100,
        ge=1,
        le=1_000_000,
        description="Most rows a query may return; the statement is read lazily, so a larger "
        "result is never computed in full.",
    )
    on_overflow: Literal["fail", "truncate"] = Field(
        "fail",
        description="A result with more than max_rows rows: fail the query (default: nothing is "
        "lost silently), or keep the first max_rows and set payload `truncated: true`.",
    )
    timeout_ms: float = Field(
        1000.0,
        gt=0,
        description="Wall-clock limit of one statement (execute and fetch); a slower one is "
        "interrupted and the query fails.",
    )
    threads: int = Field(
        1,
        ge=1,
        description="DuckDB worker threads of the stage's connection (1: a lookup stays on the "
        "stage's own thread, like other stages).",
    )
    output_field: str = Field(
        "rows",
        description="Payload field receiving the rows, each a dict of column -> value (name it "
        "`documents` when the statement selects doc_id, score and text, for retrieval.fuse or "
        "generation).",
    )

    @model_validator(mode="after")
    def _checked(self) -> SqlConfig:
        sources = self.corpus_sources() + (self.database is not None)
        if sources != 1:
            raise ValueError("give exactly one of `database`, `corpus` or `corpus_path`")
        if self.corpus_params and self.corpus is None:
            raise ValueError("`corpus_params` need `corpus` (an artefact name)")
        kind, names = parse_statement(self.sql)
        if kind not in READ_ONLY_STATEMENTS:
            raise ValueError(f"sql: only one read-only SELECT is allowed, not {kind}")
        positional = sorted(int(name) for name in names if name.isdigit())
        if positional:
            given = len(self.parameters or [])
            if given != len(positional):
                raise ValueError(
                    f"sql has {len(positional)} positional parameter(s); `parameters` lists "
                    f"{given} payload field(s)"
                )
        elif self.parameters:
            raise ValueError("`parameters` is for `?` / `$1` placeholders; `$name` binds by name")
        return self


class _Watchdog:
    """Calls `interrupt` when an armed deadline passes. One thread per stage, armed and
    disarmed around each statement (a `threading.Timer` per query would start a thread each
    time). Disarming takes the same lock as firing, so once `disarm` returns, no interrupt can
    land on a later statement."""

    def __init__(self, interrupt: Callable[[], None], name: str) -> None:
        self._interrupt = interrupt
        self._condition = threading.Condition()
        self._deadline: float | None = None
        self._fired = False
        self._closed = False
        self._thread = threading.Thread(target=self._watch, name=name, daemon=True)
        self._thread.start()

    def arm(self, timeout_s: float) -> None:
        with self._condition:
            self._deadline = time.monotonic() + timeout_s
            self._fired = False
            self._condition.notify()

    def disarm(self) -> bool:
        """Stop watching; True when the deadline passed and the interrupt was sent."""
        with self._condition:
            self._deadline = None
            return self._fired

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        with self._condition:
            while not self._closed:
                if self._deadline is None:
                    self._condition.wait()
                    continue
                remaining = self._deadline - time.monotonic()
                if remaining > 0:
                    self._condition.wait(remaining)
                    continue
                self._interrupt()
                self._fired = True
                self._deadline = None


class SqlTimeoutError(TimeoutError):
    """A `retrieval.sql` statement ran past `timeout_ms` and was interrupted."""


class SqlRowLimitError(RuntimeError):
    """A `retrieval.sql` result had more than `max_rows` rows (on_overflow: fail)."""


def _bindable(value: Any) -> Any:
    """Payload values DuckDB can bind: numpy arrays and scalars, torch tensors -> Python."""
    if hasattr(value, "detach"):
        value = value.detach().to("cpu")
    return value.tolist() if hasattr(value, "tolist") else value


def _embedding_as_array(connection: Any) -> None:
    """Parquet stores FLOAT[384] as a list, which DuckDB reads back as FLOAT[]: make it the
    fixed-size array again, so SQL can use array_cosine_similarity on it."""
    kind = connection.execute(
        "SELECT data_type FROM information_schema.columns "
        "WHERE table_name = 'documents' AND column_name = 'embedding'"
    ).fetchone()
    if kind is None or not str(kind[0]).endswith("[]"):
        return
    widths = connection.execute(
        "SELECT min(len(embedding)), max(len(embedding)) FROM documents"
    ).fetchone()
    if widths and widths[0] and widths[0] == widths[1]:
        element = str(kind[0])[:-2]
        connection.execute(
            f"ALTER TABLE documents ALTER embedding TYPE {element}[{int(widths[0])}]"
        )


def _corpus_database(parquet: Path, cache_dir: Path) -> Path:
    """A DuckDB file holding the corpus as table `documents`, built once per corpus content
    under the cache folder (a file lock lets collocated workers share one build). A table, not
    a view over the Parquet file: the connection then reads no file but its own, so external
    access can be switched off, and lookups are faster (1.0 vs 1.5 ms for the spec's query)."""
    import duckdb

    digest = hashlib.sha256()
    with parquet.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    folder = cache_dir / "retrieval_sql"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{digest.hexdigest()[:32]}.duckdb"
    with locked(folder / f"{target.name}.lock"):
        if not target.exists():
            scratch = target.with_suffix(f".{os.getpid()}.tmp")
            scratch.unlink(missing_ok=True)
            connection = duckdb.connect(str(scratch))
            try:
                connection.execute(
                    "CREATE TABLE documents AS SELECT * FROM read_parquet(?)", [str(parquet)]
                )
                _embedding_as_array(connection)
            finally:
                connection.close()
            os.replace(scratch, target)
    return target


class SqlRetrievalStage(Stage[SqlConfig]):
    """Runs one parameterised SQL statement on a read-only DuckDB connection. ONE QUERY = the
    statement with its parameters bound from payload fields -> at most `max_rows` rows. Payload
    out: a new dict with the input's fields and `output_field` (list of row dicts).

    Guards, in depth: only a single SELECT passes validation; the connection is opened
    read-only, external access (files, network, extensions) is switched off after setup and
    the configuration locked, so no statement can write, read other files or undo that; each
    statement runs under a watchdog that interrupts it at `timeout_ms`.
    """

    def prepare(self) -> None:
        import duckdb

        config = self.config
        if config.database is not None:
            path = Path(config.database).expanduser()
            if not path.is_file():
                raise FileNotFoundError(f"database {path} does not exist")
        else:
            path = _corpus_database(corpus_file(config), self.context.cache_dir)
        self._duckdb = duckdb
        # Settings at open, not SET afterwards: DuckDB shares one database instance between the
        # connections of a process to the same file, and the first lock would refuse the
        # second stage's SETs. Same settings -> one shared read-only instance.
        settings: dict[str, str | bool | int | float | list[str]] = {
            "threads": config.threads,
            "enable_external_access": False,  # no other file, no network, no extension
            "lock_configuration": True,  # and no statement can switch that back
        }
        try:
            connection = duckdb.connect(str(path), read_only=True, config=settings)
        except duckdb.Error as error:
            raise RuntimeError(f"cannot open {path}: {str(error).splitlines()[0]}") from None
        self._connection = connection
        _kind, names = parse_statement(config.sql)
        positional = any(name.isdigit() for name in names)
        self._positional = list(config.parameters or []) if positional else None
        self._named = sorted(names) if not positional else []
        self._watchdog = _Watchdog(connection.interrupt, f"sql-watchdog:{self.context.stage_id}")

    def _parameters(self, payload: Any) -> Any:
        wanted = self._positional if self._positional is not None else self._named
        if not wanted:
            return None
        if not isinstance(payload, dict):
            raise TypeError(f"parameters need a dict payload, got {type(payload).__name__}")
        missing = [name for name in wanted if name not in payload]
        if missing:
            raise KeyError(f"payload has no field(s) {', '.join(missing)} for the sql parameters")
        if self._positional is not None:
            return [_bindable(payload[name]) for name in self._positional]
        return {name: _bindable(payload[name]) for name in self._named}

    def run(self, query: Query) -> Route:
        config = self.config
        payload = query.payload
        parameters = self._parameters(payload)
        limit = config.max_rows
        connection = self._connection
        self._watchdog.arm(config.timeout_ms / 1000.0)
        try:
            cursor = connection.execute(config.sql, parameters)
            fetched = cursor.fetchmany(limit + 1)  # one more than allowed: detects overflow
            columns = [column[0] for column in cursor.description or ()]
        except self._duckdb.InterruptException:
            raise SqlTimeoutError(
                f"sql statement interrupted after timeout_ms={config.timeout_ms:g}"
            ) from None
        finally:
            self._watchdog.disarm()
        truncated = len(fetched) > limit
        if truncated and config.on_overflow == "fail":
            raise SqlRowLimitError(f"sql result has more than max_rows={limit} rows")
        rows = [dict(zip(columns, row, strict=True)) for row in fetched[:limit]]
        out = dict(payload) if isinstance(payload, dict) else {"input": payload}
        out[config.output_field] = rows
        if truncated:
            out["truncated"] = True
        query.payload = out
        return None

    def close(self) -> None:
        watchdog = getattr(self, "_watchdog", None)
        if watchdog is not None:
            watchdog.close()
        connection = getattr(self, "_connection", None)
        if connection is not None:
            connection.close()


# --------------------------------------------------------------------------- retrieval.fuse


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

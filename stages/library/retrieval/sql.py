"""`retrieval.sql`: one read-only, parameterised SQL statement over a corpus in DuckDB, with a
row limit and a per-query timeout.

No duckdb import at module level: the statement check imports it inside the validator, which
only runs when a spec uses this stage.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from stages.artifacts.store import locked
from stages.contracts.errors import RunFailedError
from stages.library.retrieval.corpus import CorpusConfig, corpus_file
from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage

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


class SqlTimeoutError(RunFailedError, TimeoutError):
    """A `retrieval.sql` statement ran past `timeout_ms` and was interrupted."""


class SqlRowLimitError(RunFailedError, RuntimeError):
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

"""DuckDB connections for analysis: every connection the analysis layer opens (writer and
readers), and the one-writer lock. The checked reader and read-only querying are
`analysis.warehouse.reader`; the SQL files `analysis.warehouse.sql_files`.

Readers (reports, `collobench sql`, `compare`) only ever get a read-only connection, so an ad-hoc
query can never change the warehouse; writing is the loader's job alone, one writer at a time.

Concurrency, as DuckDB allows it: one PROCESS may open the file for writing, and while it has it
open no other process can open it at all, not even read-only (and while readers have it open, a
writer cannot). So:
- the writer (`analysis.warehouse.loader.load_runs`) first takes an exclusive advisory lock,
  `fcntl.flock` on `<db>.lock` beside the file, and records its pid and start time in it; a
  second writer prints once "waiting for the warehouse writer (pid N, since HH:MM:SS) ..." and
  waits up to `COLLOBENCH_WAREHOUSE_WAIT_S` seconds (default 60), then fails with WarehouseBusy;
- a reader waits the same way while a collobench writer holds that lock, then opens the file
  read-only, retrying DuckDB's own lock error for READER_RETRY_S seconds (a reader or writer
  that is not collobench, such as the DuckDB CLI, holds the file);
- DuckDB's lock error ("Could not set lock on file") becomes one WarehouseBusy line naming the
  other program's pid.
Every connection gets `memory_limit` (`COLLOBENCH_DUCKDB_MEMORY`, default 2GB) and a
`temp_directory` beside the warehouse (`<db>.tmp/`), where DuckDB spills what does not fit.
The two settings are read here only (the analysis package never imports the stages package).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO

import duckdb

from analysis.warehouse.sql_files import WarehouseError

MEMORY_ENV = "COLLOBENCH_DUCKDB_MEMORY"
# 2GB, not 1GB: over Parquet (the raw-table views) DuckDB 2.0 reserves memory by the scan's
# row count, and a quantile aggregate over 50M stage events that peaks at 650 MB failed at 1GB.
DEFAULT_MEMORY_LIMIT = "2GB"
WAIT_ENV = "COLLOBENCH_WAREHOUSE_WAIT_S"
DEFAULT_WAIT_S = 60.0
# How long a reader retries DuckDB's own lock error (another program has the file open).
READER_RETRY_S = 5.0
POLL_S = 0.1

Notify = Callable[[str], None]


class WarehouseBusy(WarehouseError):
    """Another writer (collobench or another program) holds the warehouse past the wait."""


def to_stderr(message: str) -> None:
    """The default `notify`: one line on stderr, flushed (a waiting user sees it at once)."""
    print(message, file=sys.stderr, flush=True)


def memory_limit() -> str:
    """DuckDB's memory_limit for every analysis connection: `$COLLOBENCH_DUCKDB_MEMORY`, else
    2GB (DuckDB's own default is 80% of RAM, which a 50M-row view would take)."""
    return os.environ.get(MEMORY_ENV, "").strip() or DEFAULT_MEMORY_LIMIT


def writer_wait_s() -> float:
    """Seconds a writer (or a reader) waits for the warehouse writer before giving up:
    `$COLLOBENCH_WAREHOUSE_WAIT_S`, else 60. A value that is not a number >= 0 is a
    WarehouseError naming the setting."""
    raw = os.environ.get(WAIT_ENV, "").strip()
    if not raw:
        return DEFAULT_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise WarehouseError(f"{WAIT_ENV}: {raw!r} is not a number of seconds >= 0")
    return value


def lock_path(db_path: Path | str) -> Path:
    """The writer's advisory lock file, beside the warehouse: `<db>.lock`."""
    path = Path(db_path)
    return path.with_name(path.name + ".lock")


def temp_directory(db_path: Path | str) -> Path:
    """Where DuckDB spills what exceeds memory_limit: `<db>.tmp/`, beside the warehouse."""
    path = Path(db_path)
    return path.with_name(path.name + ".tmp")


def _connect(db_path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    """duckdb.connect with the analysis layer's settings: THE place every connection opens.
    A reader's connection is not usable until `harden` has run on it (reader.connect_read_only)."""
    config: dict[str, str | bool | int | float | list[str]] = {
        "memory_limit": memory_limit(),
        "temp_directory": str(temp_directory(db_path)),
    }
    try:
        return duckdb.connect(str(db_path), read_only=read_only, config=config)
    except (duckdb.ParserException, duckdb.InvalidInputException) as error:
        if "memory" in str(error).lower():
            first = str(error).splitlines()[0]
            raise WarehouseError(f"{MEMORY_ENV}: {memory_limit()!r}: {first}") from None
        raise


def harden(connection: duckdb.DuckDBPyConnection, readable: list[str]) -> None:
    """Switch a reader's external access off, except for the `readable` files (the registered
    Parquet files the raw-table views read), and lock its configuration, so no statement can
    `SET` that back: `read_csv('/etc/passwd')`, `COPY ... TO`, `ATTACH`, `INSTALL` fail.
    DuckDB takes allowed_paths only while external access is still on, so the order matters."""
    connection.execute("SET allowed_paths = ?", [readable])
    connection.execute("SET enable_external_access = false")
    connection.execute("SET lock_configuration = true")


def duckdb_lock_holder(error: BaseException) -> str | None:
    """For DuckDB's "Could not set lock on file" error, who holds the file ("pid N, <program>",
    or "another process"); None for any other error."""
    text = str(error)
    if "Could not set lock on file" not in text:
        return None
    found = re.search(r"held in (?P<prog>.+?) \(PID (?P<pid>\d+)\)", text)
    if not found:
        return "another process"
    return f"pid {found['pid']}, {found['prog']}"


def _holder(handle: IO[str]) -> str:
    """ "pid N, since HH:MM:SS" from the lock file the current writer wrote (best effort)."""
    try:
        handle.seek(0)
        record = json.loads(handle.read() or "{}")
        since = datetime.fromisoformat(record["since"]).astimezone().strftime("%H:%M:%S")
        return f"pid {int(record['pid'])}, since {since}"
    except (OSError, ValueError, KeyError, TypeError):
        return "pid unknown"


def _try_flock(handle: IO[str], operation: int) -> bool:
    try:
        fcntl.flock(handle.fileno(), operation | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _wait_for_writer(
    db: Path, handle: IO[str], operation: int, wait_s: float, notify: Notify
) -> None:
    """Take `operation` (LOCK_EX for a writer, LOCK_SH for a reader's probe) on the lock file,
    waiting up to wait_s while the writer holds it; a short silent grace first, since a
    reader's probe holds the lock for microseconds. WarehouseBusy when the wait runs out."""
    started = time.monotonic()
    told = False
    while not _try_flock(handle, operation):
        waited = time.monotonic() - started
        if waited >= wait_s:
            raise WarehouseBusy(
                f"{db}: the warehouse writer ({_holder(handle)}) still holds it after "
                f"{wait_s:g} s; try again later or raise {WAIT_ENV}"
            )
        if not told and waited >= 2 * POLL_S:
            notify(f"waiting for the warehouse writer ({_holder(handle)}) ...")
            told = True
        time.sleep(POLL_S)


@contextmanager
def writer_lock(
    db_path: Path | str, wait_s: float | None = None, notify: Notify = to_stderr
) -> Iterator[None]:
    """Hold the warehouse's one-writer lock (`<db>.lock`, fcntl.flock, exclusive) for the
    block; waits up to wait_s (default `$COLLOBENCH_WAREHOUSE_WAIT_S`) while another writer
    holds it, telling `notify` once, then raises WarehouseBusy. The lock goes with the process
    (a killed writer leaves no stale lock)."""
    db = Path(db_path)
    budget = writer_wait_s() if wait_s is None else wait_s
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path(db), "a+", encoding="utf-8") as handle:
        _wait_for_writer(db, handle, fcntl.LOCK_EX, budget, notify)
        try:
            handle.seek(0)
            handle.truncate()
            record = {"pid": os.getpid(), "since": datetime.now().astimezone().isoformat()}
            handle.write(json.dumps(record))
            handle.flush()
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _once(notify: Notify) -> Notify:
    """`notify`, passing each distinct message on once (a wait is announced, not narrated)."""
    said: set[str] = set()

    def tell(message: str) -> None:
        if message not in said:
            said.add(message)
            notify(message)

    return tell


def _writer_holds_lock(db: Path) -> bool:
    """True when a collobench writer holds `<db>.lock` right now (probed with a shared lock)."""
    try:
        with open(lock_path(db), encoding="utf-8") as handle:
            if _try_flock(handle, fcntl.LOCK_SH):
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
                return False
            return True
    except FileNotFoundError:
        return False


def _foreign_message(db: Path, holder: str, doing: str) -> str:
    return (
        f"{db}: another process ({holder}) has the warehouse open, so DuckDB refuses "
        f"{doing} it; close that program (a DuckDB shell?) and try again"
    )


def _open_retrying(
    db: Path, read_only: bool, retry_s: float, notify: Notify
) -> duckdb.DuckDBPyConnection:
    """Open `db`, retrying DuckDB's lock error (another process has the file open) for retry_s
    seconds, telling `notify` once; then WarehouseBusy naming the holder."""
    started = time.monotonic()
    told = False
    while True:
        try:
            return _connect(db, read_only)
        except duckdb.IOException as error:
            holder = duckdb_lock_holder(error)
            if holder is None:
                raise
            if time.monotonic() - started >= retry_s:
                doing = "reading" if read_only else "writing"
                raise WarehouseBusy(_foreign_message(db, holder, doing)) from None
            if not told:
                notify(f"waiting for the process that has the warehouse open ({holder}) ...")
                told = True
            time.sleep(POLL_S)


def connect_writer(
    db_path: Path | str, wait_s: float | None = None, notify: Notify = to_stderr
) -> duckdb.DuckDBPyConnection:
    """Open the warehouse for writing (created if missing); call it holding writer_lock.
    Readers and other programs that have the file open are waited for up to wait_s."""
    budget = writer_wait_s() if wait_s is None else wait_s
    return _open_retrying(Path(db_path), False, budget, notify)


def open_read_only(
    db_path: Path | str, wait_s: float | None = None, notify: Notify = to_stderr
) -> duckdb.DuckDBPyConnection:
    """Open the warehouse read-only, not yet checked nor hardened (`analysis.warehouse.reader` does
    both); a missing file is a FileNotFoundError naming the fix.

    Waits (message once) while a collobench writer holds the lock, up to wait_s (default
    `$COLLOBENCH_WAREHOUSE_WAIT_S`); retries DuckDB's lock error (another program has the file
    open) READER_RETRY_S seconds. Failures are one-line WarehouseErrors."""
    path = Path(db_path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such database; load a run first (collobench load)")
    budget = writer_wait_s() if wait_s is None else wait_s
    once = _once(notify)
    started = time.monotonic()
    foreign_since: float | None = None
    while True:
        if lock_path(path).exists():
            with open(lock_path(path), encoding="utf-8") as handle:
                remaining = max(0.0, budget - (time.monotonic() - started))
                _wait_for_writer(path, handle, fcntl.LOCK_SH, remaining, once)
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)  # a probe: never block the writer
        try:
            connection = _connect(path, read_only=True)
            break
        except duckdb.IOException as error:
            holder = duckdb_lock_holder(error)
            if holder is None:
                raise
            if _writer_holds_lock(path):
                continue  # a collobench writer started between the probe and the open: wait
            foreign_since = foreign_since or time.monotonic()
            if time.monotonic() - foreign_since >= min(budget, READER_RETRY_S):
                raise WarehouseBusy(_foreign_message(path, holder, "reading")) from None
            once(f"waiting for the process that has the warehouse open ({holder}) ...")
            time.sleep(POLL_S)
    return connection

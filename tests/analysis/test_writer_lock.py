"""One writer at a time, with real processes: a second `collobench load` waits for the first and
then succeeds, or gives up cleanly after COLLOBENCH_WAREHOUSE_WAIT_S; a reader during a load gets
its answer after it; another program holding the DuckDB file is one clear line, never a
traceback. And every analysis connection gets the memory limit and temp directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from analysis.warehouse import db as warehouse
from analysis.warehouse.db import writer_lock
from analysis.warehouse.loader import load_runs
from analysis.warehouse.reader import connect_read_only
from analysis.warehouse.sql_files import WarehouseError
from tests.analysis.runs import collocated_run, single_pipeline_run
from tests.helpers import REPO

COLLOC = "20260102-000000-colloc"


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", **extra}


@contextmanager
def holder(script: str, db: Path, hold_s: float) -> Iterator[subprocess.Popen[str]]:
    """A process running `script` (with `db`, `hold_s` and `REPO` defined) that prints "held"
    once it holds what it holds; yields when it says so, kills it on the way out."""
    prelude = f"db = {str(db)!r}\nhold_s = {hold_s}\n"
    process = subprocess.Popen(
        [sys.executable, "-c", prelude + textwrap.dedent(script)],
        cwd=REPO,
        env=env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "held"
        yield process
    finally:
        process.kill()
        process.wait()


# Holds the collobench writer lock (as a long load would) for hold_s seconds.
HOLD_WRITER_LOCK = """
    import time
    from analysis.warehouse.db import writer_lock
    with writer_lock(db):
        print("held", flush=True)
        time.sleep(hold_s)
"""

# A slow load: takes the lock, opens the file, loads the collocated run inside a transaction,
# and commits only after hold_s seconds.
SLOW_LOAD = """
    import time
    from pathlib import Path
    from analysis.warehouse.db import connect_writer, writer_lock
    from analysis.warehouse.loader import _read_manifest, ensure_schema, load_run
    with writer_lock(db):
        connection = connect_writer(db)
        ensure_schema(connection, db)
        print("held", flush=True)
        time.sleep(hold_s)
        load_run(connection, RUN_DIR, _read_manifest(RUN_DIR))
        connection.close()
"""

# Another program (not collobench) with the DuckDB file open for writing: no writer lock.
FOREIGN_WRITER = """
    import time, duckdb
    connection = duckdb.connect(db)
    print("held", flush=True)
    time.sleep(hold_s)
"""


def cli(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stages.cli", *args],
        cwd=REPO,
        env=env(**extra),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.spawns
def test_a_second_load_waits_for_the_writer_then_succeeds(tmp_path: Path, db_path: Path) -> None:
    load_runs([single_pipeline_run(tmp_path).write()], db_path)
    run_dir = collocated_run(tmp_path).write()
    # 5 s: the second load checks and summarises its run before it asks for the lock
    with holder(HOLD_WRITER_LOCK, db_path, 5.0) as first:
        started = time.monotonic()
        second = cli("load", str(run_dir), "--db", str(db_path), COLLOBENCH_WAREHOUSE_WAIT_S="30")
        waited = time.monotonic() - started
    assert second.returncode == 0, second.stderr
    assert f"loaded {COLLOC}" in second.stdout
    lines = [line for line in second.stderr.splitlines() if "waiting" in line]
    assert len(lines) == 1, second.stderr  # said once, not once per poll
    assert lines[0].startswith(f"waiting for the warehouse writer (pid {first.pid}, since ")
    assert waited > 1.0  # it did wait for the holder


@pytest.mark.spawns
def test_a_load_that_waits_too_long_fails_in_one_line(tmp_path: Path, db_path: Path) -> None:
    run_dir = single_pipeline_run(tmp_path).write()
    with holder(HOLD_WRITER_LOCK, db_path, 30.0) as first:
        second = cli("load", str(run_dir), "--db", str(db_path), COLLOBENCH_WAREHOUSE_WAIT_S="0.5")
    assert second.returncode == 2
    assert "Traceback" not in second.stderr
    last = second.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{db_path}: the warehouse writer (pid {first.pid}, since ")
    assert "still holds it after 0.5 s" in last and "COLLOBENCH_WAREHOUSE_WAIT_S" in last


@pytest.mark.spawns
def test_a_reader_during_a_load_gets_the_answer_after_it(tmp_path: Path, db_path: Path) -> None:
    load_runs([single_pipeline_run(tmp_path).write()], db_path)
    run_dir = collocated_run(tmp_path).write()
    script = SLOW_LOAD.replace("RUN_DIR", f"Path({str(run_dir)!r})")
    with holder(script, db_path, 1.5) as loading:
        reader = cli(
            "sql", "SELECT count(*) AS runs FROM runs", "--format", "json", "--db", str(db_path)
        )
        loading.wait(timeout=60)
    assert reader.returncode == 0, reader.stderr
    assert json.loads(reader.stdout) == [{"runs": 2}]  # the load had committed
    assert f"waiting for the warehouse writer (pid {loading.pid}" in reader.stderr


@pytest.mark.spawns
def test_another_program_holding_the_file_is_one_clear_line(tmp_path: Path, db_path: Path) -> None:
    run_dir = single_pipeline_run(tmp_path).write()
    load_runs([run_dir], db_path)
    with holder(FOREIGN_WRITER, db_path, 30.0) as other:
        writer = cli("load", str(run_dir), "--db", str(db_path), COLLOBENCH_WAREHOUSE_WAIT_S="0.5")
        reader = cli("sql", "SELECT 1", "--db", str(db_path), COLLOBENCH_WAREHOUSE_WAIT_S="0.5")
    for completed, doing in ((writer, "writing"), (reader, "reading")):
        assert completed.returncode == 2, completed.stderr
        assert "Traceback" not in completed.stderr
        last = completed.stderr.strip().splitlines()[-1]
        assert last.startswith(f"{db_path}: another process (pid {other.pid}, "), last
        assert f"DuckDB refuses {doing} it" in last


@pytest.mark.spawns
def test_the_lock_is_released_after_a_load_and_with_a_dead_holder(
    tmp_path: Path, db_path: Path
) -> None:
    run_dir = single_pipeline_run(tmp_path).write()
    load_runs([run_dir], db_path)
    with writer_lock(db_path, wait_s=0):  # free again after the load
        pass
    with holder(HOLD_WRITER_LOCK, db_path, 30.0) as first:
        first.kill()
        first.wait()
        with writer_lock(db_path, wait_s=1):  # the kernel dropped the dead process's lock
            pass
    said: list[str] = []
    load_runs([run_dir], db_path, wait_s=0, notify=said.append)
    assert said == []


def test_every_connection_has_the_memory_limit_and_temp_directory(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLLOBENCH_DUCKDB_MEMORY", "256MB")
    load_runs([single_pipeline_run(tmp_path).write()], db_path)
    connection = connect_read_only(db_path)
    try:
        limit, temp = connection.execute(
            "SELECT current_setting('memory_limit'), current_setting('temp_directory')"
        ).fetchone() or (None, None)
    finally:
        connection.close()
    assert limit == "244.1 MiB"  # 256 * 10^6 bytes, as DuckDB prints it
    assert temp == str(db_path.with_name("results.duckdb.tmp"))
    monkeypatch.setenv("COLLOBENCH_DUCKDB_MEMORY", "lots")
    with pytest.raises(WarehouseError, match="COLLOBENCH_DUCKDB_MEMORY: 'lots'"):
        connect_read_only(db_path)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", 60.0), ("0", 0.0), ("2.5", 2.5), ("abc", None), ("-1", None), ("nan", None)],
)
def test_the_writer_wait_setting(
    value: str, expected: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$COLLOBENCH_WAREHOUSE_WAIT_S: 60 s unset, a number >= 0, anything else one clear error;
    $COLLOBENCH_DUCKDB_MEMORY: "2GB" unset."""
    monkeypatch.setenv(warehouse.WAIT_ENV, value)
    monkeypatch.setenv(warehouse.MEMORY_ENV, value)
    assert warehouse.memory_limit() == (value or "2GB")
    if expected is None:
        with pytest.raises(WarehouseError, match=warehouse.WAIT_ENV):
            warehouse.writer_wait_s()
    else:
        assert warehouse.writer_wait_s() == expected

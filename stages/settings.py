"""Embedded defaults: everything a run writes lives under one home folder (`.collobench/`)."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "COLLOBENCH_HOME"


def home() -> Path:
    """`$COLLOBENCH_HOME`, else `.collobench` in the current directory."""
    return Path(os.environ.get(HOME_ENV, ".collobench")).absolute()


def runs_dir() -> Path:
    return home() / "runs"


def cache_dir() -> Path:
    """Generated datasets and models (seeded, so they can be rebuilt at will)."""
    return home() / "cache"


def artifacts_dir() -> Path:
    """Built datasets and models: `<name>/<content-hash>/` with a `metadata.json` each."""
    return home() / "artifacts"


def duckdb_path() -> Path:
    return home() / "results.duckdb"


def mlflow_tracking_uri() -> str | None:
    """`$MLFLOW_TRACKING_URI`, else the sqlite store under the home; `COLLOBENCH_MLFLOW=0`
    turns tracking off."""
    if os.environ.get("COLLOBENCH_MLFLOW", "1") in ("0", "false", "off"):
        return None
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{home() / 'mlflow.db'}"


# The DuckDB warehouse's settings. The analysis package reads the same variables itself
# (analysis/db.py: memory_limit, writer_wait_s; it imports nothing from stages); a test checks
# that the two readings agree.
WAREHOUSE_WAIT_ENV = "COLLOBENCH_WAREHOUSE_WAIT_S"
DUCKDB_MEMORY_ENV = "COLLOBENCH_DUCKDB_MEMORY"


def warehouse_wait_s() -> float:
    """`$COLLOBENCH_WAREHOUSE_WAIT_S`, else 60: how long a `collobench load` (or the load at the
    end of `collobench run`, or a reader) waits for another process writing the warehouse
    before it gives up with one line (the CLI exits 2). A value that is not a number >= 0 is a
    ValueError."""
    raw = os.environ.get(WAREHOUSE_WAIT_ENV, "").strip()
    if not raw:
        return 60.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"{WAREHOUSE_WAIT_ENV}: {raw!r} is not a number of seconds >= 0")
    return value


def duckdb_memory_limit() -> str:
    """`$COLLOBENCH_DUCKDB_MEMORY`, else "1GB": DuckDB's memory_limit on every warehouse
    connection (beyond it DuckDB spills to `<db>.tmp/` beside the warehouse)."""
    return os.environ.get(DUCKDB_MEMORY_ENV, "").strip() or "1GB"

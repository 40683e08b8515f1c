"""Embedded defaults: everything a run writes lives under one home folder (`.collobench/`);
the results (run directories, capacity searches, the warehouse) may live apart, in one folder
every host of a cluster shares (`$COLLOBENCH_RESULTS_DIR`)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

HOME_ENV = "COLLOBENCH_HOME"
HOST_ID_ENV = "COLLOBENCH_HOST_ID"
RESULTS_DIR_ENV = "COLLOBENCH_RESULTS_DIR"
"""The folder of `runs/`, `capacity/` and `results.duckdb` (default: the home)."""
PARENT_PID_ENV = "COLLOBENCH_PARENT_PID"
"""The pid whose death ends a run (stages.process_lifetime.ParentWatch); default: the
parent of `collobench run`; `0`: no watch (a run meant to outlive its shell)."""


def home() -> Path:
    """`$COLLOBENCH_HOME`, else `.collobench` in the current directory."""
    return Path(os.environ.get(HOME_ENV, ".collobench")).absolute()


def host_id() -> str:
    """The host id a run records (the manifest's `host`, the warehouse's `runs.host`):
    `$COLLOBENCH_HOST_ID`, else the machine's host name. A scale-out worker sets it to its
    pool's `host`, so runs from every host stay apart in one warehouse."""
    return os.environ.get(HOST_ID_ENV) or socket.gethostname()


def results_dir() -> Path:
    """`$COLLOBENCH_RESULTS_DIR`, else the home: where run directories, capacity searches and
    the warehouse live. Every host of a cluster names one shared folder here, so their results
    land side by side (run directory names carry the run id) and load into one warehouse (its
    writer lock serialises the hosts). Cache, artefacts, locks and MLflow stay in the home."""
    named = os.environ.get(RESULTS_DIR_ENV)
    return Path(named).absolute() if named else home()


def runs_dir() -> Path:
    return results_dir() / "runs"


def capacity_dir() -> Path:
    """Capacity searches (`collobench capacity`): `<search_id>/` with search.json,
    probes.jsonl, capacity.json and each probe's run directory under `probes/`."""
    return results_dir() / "capacity"


def ab_dir() -> Path:
    """A/B sessions (`collobench ab`): `<session_id>/` with session.json, segments.jsonl and
    each segment's run directory under `runs/`, beside `spread.json` (the stored per-block
    spreads) and `envs/` (revision arms' worktrees and environments)."""
    return results_dir() / "ab"


def cache_dir() -> Path:
    """Generated datasets and models (seeded, so they can be rebuilt at will)."""
    return home() / "cache"


def artifacts_dir() -> Path:
    """Built datasets and models: `<name>/<content-hash>/` with a `metadata.json` each."""
    return home() / "artifacts"


def locks_dir() -> Path:
    """Where the one-benchmark-per-device locks live: `$COLLOBENCH_LOCK_DIR`, else `locks/` under
    the home (set it to one folder for every home on a machine to share the devices' locks)."""
    return Path(os.environ.get("COLLOBENCH_LOCK_DIR") or home() / "locks").absolute()


def device_wait_s() -> float:
    """How long a run waits for a device another benchmark holds (`COLLOBENCH_DEVICE_WAIT_S`,
    default one hour) before giving up with exit code 2."""
    return float(os.environ.get("COLLOBENCH_DEVICE_WAIT_S", "3600"))


def duckdb_path() -> Path:
    return results_dir() / "results.duckdb"


def mlflow_tracking_uri() -> str | None:
    """`$MLFLOW_TRACKING_URI`, else the sqlite store under the home; `COLLOBENCH_MLFLOW=0`
    turns tracking off."""
    if os.environ.get("COLLOBENCH_MLFLOW", "1") in ("0", "false", "off"):
        return None
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return default_tracking_uri(home())


def default_tracking_uri(home_dir: Path) -> str:
    """`sqlite:///<home>/mlflow.db`, path made absolute; artifacts then go to <home>/mlartifacts
    (`stages.cli.mlflow_client.artifact_location_for`), never to the CWD's ./mlruns."""
    return f"sqlite:///{Path(home_dir).expanduser().resolve() / 'mlflow.db'}"

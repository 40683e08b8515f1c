"""The cluster's processes: each started in a session (and process group) of its own
(stages.process_groups), recorded in `state.json` (pid, group, start time) and stopped by group
(bench_defs.cluster.control: SIGTERM, then SIGKILL)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel, ConfigDict, Field

from stages.contracts.errors import RunFailedError
from stages.process_groups import start_group


class ClusterError(RunFailedError, RuntimeError):
    """A one-line reason `up` or `down` stopped (the last log lines appended)."""


class ProcRecord(BaseModel):
    """One process `up` started."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Its role: postgres, redis, code-server, webserver, ...")
    pid: int = Field(description="Its pid (the leader of its process group).")
    pgid: int = Field(description="Its process group.")
    create_time: float = Field(description="psutil's create_time: a reused pid is not it.")
    log: str = Field(description="Its log file.")


class ClusterState(BaseModel):
    """`state.json`: what runs and where it answers."""

    model_config = ConfigDict(extra="forbid")

    processes: list[ProcRecord] = Field(default_factory=list, description="In start order.")
    webserver_url: str | None = Field(None, description="The UI and GraphQL endpoint.")
    postgres_url: str | None = Field(None, description="Dagster's storage.")
    redis_url: str | None = Field(None, description="Celery's broker and result backend.")
    queues: dict[str, str] = Field(default_factory=dict, description="Worker host -> queue.")
    launcher: str = Field("celery", description="The run launcher: celery or default.")
    results_dir: str | None = Field(
        None, description="COLLOBENCH_RESULTS_DIR of every process: runs, searches, warehouse."
    )


def load_state(path: Path) -> ClusterState:
    if not path.is_file():
        return ClusterState()
    return ClusterState.model_validate_json(path.read_text(encoding="utf-8"))


def save_state(path: Path, state: ClusterState) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.model_dump(), indent=2), encoding="utf-8")
    tmp.replace(path)


def spawn(
    name: str, argv: Sequence[str], env: Mapping[str, str], log: Path, cwd: Path
) -> ProcRecord:
    """Start `argv` in a new session, stdout and stderr to `log`; the caller never waits on it
    (a later `down`, in another process, stops it by group)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = start_group(argv, stdout=out, env=env, cwd=cwd)
    return ProcRecord(
        name=name,
        pid=process.pid,
        pgid=process.pid,
        create_time=psutil.Process(process.pid).create_time(),
        log=str(log),
    )


def alive(record: ProcRecord) -> bool:
    """The recorded process still runs (same pid and start time, not a zombie)."""
    with contextlib.suppress(psutil.Error):
        process = psutil.Process(record.pid)
        if abs(process.create_time() - record.create_time) < 0.01:
            return process.status() != psutil.STATUS_ZOMBIE
    return False


def tail(log: Path | str, lines: int = 5) -> str:
    """The last lines of a log, joined with ' | ' (for one-line errors)."""
    with contextlib.suppress(OSError):
        text = Path(log).read_text(encoding="utf-8", errors="replace").strip().splitlines()
        return " | ".join(line.strip() for line in text[-lines:])
    return "(no log)"


def wait_ready(record: ProcRecord, check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `check` until it holds; a dead process or the timeout raises ClusterError with the
    last lines of its log."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(Exception):
            if check():
                return
        if not alive(record):
            raise ClusterError(f"{record.name} exited before {what}: {tail(record.log)}")
        if time.monotonic() > deadline:
            raise ClusterError(
                f"{record.name}: not {what} after {timeout_s:g} s: {tail(record.log)}"
            )
        time.sleep(0.5)


def env_with(**extra: str) -> dict[str, Any]:
    """This process's environment with `extra` on top."""
    return {**os.environ, **extra}

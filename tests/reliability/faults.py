"""Helpers of the fault-injection suite (`test_faults.py`): short two-pipeline specs, a watch on
every process a run starts, CLI runs in a subprocess, and what a fault left in the manifest,
in a fresh DuckDB warehouse and in the Dagster `validity` check."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from analysis.warehouse.loader import load_runs
from analysis.warehouse.reader import connect_read_only
from bench_defs.checks import warehouse_checks
from stages.rundir.tables import read_table
from tests.helpers import REPO, spec_doc

TIMEOUT_S = 5.0
"""Every pipeline's `loadgen.timeout_s` in these specs."""
RUN_GRACE_S = 10.0
"""The issue's bound: a run ends within its timeout plus this."""
QUERY_STATUSES = {"ok", "error", "dropped", "timeout", "not_issued"}


def fault_spec(
    victim_stage: dict[str, Any], duration_s: float = 1.5, **victim_loadgen: Any
) -> dict[str, Any]:
    """`tests.helpers.spec_doc` (a `victim` pipeline with the faulty stage after a noop and a
    healthy `survivor`) with both pipelines at 200 queries/s (query N arrives N / 200 s into
    the window), bounded by TIMEOUT_S and lasting `duration_s`."""
    loadgen = {"type": "server", "rate": 200, "timeout_s": TIMEOUT_S, "duration_s": duration_s}
    doc = spec_doc(victim_stage, **{**loadgen, **victim_loadgen})
    doc["pipelines"][1]["loadgen"].update(timeout_s=TIMEOUT_S, duration_s=duration_s)
    return doc


def limit_s(doc: dict[str, Any]) -> float:
    """How long a one-phase run of `doc` may take: its longest `timeout_s` plus RUN_GRACE_S."""
    return max(float(p["loadgen"]["timeout_s"]) for p in doc["pipelines"]) + RUN_GRACE_S


def is_gone(process: psutil.Process) -> bool:
    """Ended (a zombie has ended too: only its exit status is left for its parent)."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


class ProcessWatch:
    """Records every descendant of `root_pid` while a run goes on (a thread polls every
    `period_s`), so the test can check afterwards that each one ended. This session's own
    multiprocessing resource tracker (a child of pytest that lives as long as pytest) is not
    the run's."""

    def __init__(self, root_pid: int, period_s: float = 0.05) -> None:
        self.root_pid = root_pid
        self.seen: dict[int, psutil.Process] = {}
        self._period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="process-watch", daemon=True)

    def __enter__(self) -> ProcessWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def snapshot(self) -> list[psutil.Process]:
        """The root's descendants now (also recorded)."""
        try:
            children = psutil.Process(self.root_pid).children(recursive=True)
        except psutil.Error:
            return []
        found = []
        for child in children:
            with contextlib.suppress(psutil.Error):
                if "resource_tracker" in " ".join(child.cmdline()):
                    continue
                self.seen.setdefault(child.pid, child)
                found.append(child)
        return found

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.snapshot()
            self._stop.wait(self._period_s)

    def left(self, grace_s: float = 3.0) -> list[psutil.Process]:
        """The recorded processes still running after up to `grace_s` (a process that is
        exiting gets that long)."""
        deadline = time.monotonic() + grace_s
        while True:
            alive = [process for process in self.seen.values() if not is_gone(process)]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.1)


def spawned_children(watch: ProcessWatch, exclude: set[int]) -> list[psutil.Process]:
    """The root's `spawn`ed children (workers, samplers), minus the pids in `exclude`."""
    found = []
    for child in watch.snapshot():
        with contextlib.suppress(psutil.Error):
            if child.pid not in exclude and "spawn_main" in " ".join(child.cmdline()):
                found.append(child)
    return found


@dataclass
class Injected:
    """What one injected fault did, for the suite's four assertions."""

    run_dir: Path
    ended_ns: int  # when the run (or the CLI, or the last process of a killed one) ended
    limit_s: float  # its timeout plus RUN_GRACE_S, from the load's start
    watch: ProcessWatch
    reason: str  # in the manifest (results[].error, status or warnings) and the warehouse
    check: str  # in the validity check's problems
    survivor: str | None = "survivor"  # the pipeline that must end ok (None: all were hit)
    victim_rows: bool = True  # the victim flushed rows before the fault (not when it never ran)
    console: str = ""  # the CLI's stderr, when it ran as a subprocess


def manifest(run_dir: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text())
    return result


def manifest_reasons(run_dir: Path) -> str:
    """Everything the manifest says went wrong, as one text: run status, each result's
    status and error, and the warnings."""
    data = manifest(run_dir)
    lines = [f"run status {data['status']}"]
    lines += [f"{r['pipeline']}: {r['status']}: {r['error']}" for r in data["results"]]
    return "\n".join(lines + list(data["warnings"]))


def warehouse_reasons(connection: Any, run_id: str) -> str:
    """Everything the warehouse says went wrong with a run: `runs.status`, the
    `pipeline_outcomes` view and the `run_warnings` view, as one text."""
    runs = connection.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchall()
    lines = [f"run status {status}" for (status,) in runs]
    lines += [
        f"{pipeline}: {status}: {error}"
        for pipeline, status, error in connection.execute(
            "SELECT pipeline, status, error FROM pipeline_outcomes WHERE run_id = ? ORDER BY ALL",
            [run_id],
        ).fetchall()
    ]
    lines += [
        warning
        for (warning,) in connection.execute(
            "SELECT warning FROM run_warnings WHERE run_id = ? ORDER BY position", [run_id]
        ).fetchall()
    ]
    return "\n".join(lines)


@contextlib.contextmanager
def fresh_warehouse(db: Path, run_dir: Path) -> Iterator[Any]:
    """`run_dir` loaded into a new DuckDB file (the analysis loader, as `collobench load`
    does), then a read-only connection to it."""
    load_runs([run_dir], db)
    connection = connect_read_only(db)
    try:
        yield connection
    finally:
        connection.close()


def validity(connection: Any, run_id: str) -> tuple[bool, str]:
    """The Dagster `validity` check, as the warehouse asset runs it: (passed, description and
    every problem)."""
    result = warehouse_checks.validity_result(connection, run_id)
    problems = result.metadata["problems"]
    return result.passed, f"{result.description}\n{getattr(problems, 'value', problems)}"


def query_rows(run_dir: Path) -> Any:
    """The run's queries (merged file or the chunks a cut-short run left) as a DataFrame."""
    return read_table(run_dir, "queries").to_pandas()


def start_cli_run(
    doc: dict[str, Any], tmp_path: Path, extra_env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], Path]:
    """`collobench run` of `doc` in a subprocess (no MLflow, no load); returns it and the
    folder its run directory goes to."""
    spec = tmp_path / "fault.yaml"
    spec.write_text(yaml.safe_dump(doc))
    out = tmp_path / "runs"
    command = [sys.executable, "-m", "stages.cli", "run", str(spec), "--out", str(out)]
    process = subprocess.Popen(
        [*command, "--no-mlflow", "--no-load"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(extra_env or {})},
    )
    return process, out


def wait_for_flushed_rows(out: Path, pipelines: set[str], timeout_s: float = 30.0) -> Path:
    """Wait until every pipeline in `pipelines` has a queries chunk on disk (each flushes at
    least once a second); returns the run directory."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        chunks = list(out.glob("*/parts/queries/*.parquet"))
        flushed = {path.name.split("-")[2] for path in chunks}
        if pipelines <= flushed:
            return chunks[0].parents[2]
        time.sleep(0.1)
    raise AssertionError(f"no flushed rows of {pipelines} within {timeout_s} s")

"""Fault injection: every fault of issue 12 is a case, and every case asserts the same four
things (`assert_survived`):

1. the run ends within its timeout plus 10 s;
2. no process it started is left;
3. every pipeline's rows have a status, the survivor ended `ok`, and the run directory loads into
   a fresh DuckDB warehouse with every row of it;
4. the failure and its reason are in the manifest, in the warehouse (`runs.status`, the
   `pipeline_outcomes` and `run_warnings` views) and in the Dagster `validity` check.

A warehouse locked by a reader during a load is its own test below (no run is hit); the Dagster
run cancel is in tests/dagster/test_dagster_dev.py (one `dagster dev` per suite)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from analysis.warehouse.loader import load_runs
from analysis.warehouse.reader import connect_read_only
from stages.collocation.launcher import ProgressEvent
from tests.helpers import REPO, run
from tests.reliability import figures
from tests.reliability.faults import (
    QUERY_STATUSES,
    Injected,
    ProcessWatch,
    fault_spec,
    fresh_warehouse,
    limit_s,
    manifest,
    manifest_reasons,
    query_rows,
    spawned_children,
    start_cli_run,
    validity,
    wait_for_flushed_rows,
    warehouse_reasons,
)

# Every case launches a real run with a fault in it (100-120 s in all): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

Case = Callable[[str, Path, pytest.MonkeyPatch], Injected]


def _in_process(
    doc: dict[str, Any], tmp_path: Path, on_progress: Callable[[ProgressEvent], None] | None = None
) -> tuple[Path, int, ProcessWatch]:
    """Run `doc` with the launcher in this process, watching its children; returns the run
    directory, when the run ended (monotonic ns) and the watch."""
    with ProcessWatch(os.getpid()) as watch:
        result = run(doc, tmp_path / "runs", progress=on_progress)
    return result.run_dir, time.monotonic_ns(), watch


def _after_first_flush(event: ProgressEvent, pipeline: str = "victim") -> bool:
    """A progress event of `pipeline` 1.5 s into its load: its first chunk (flushed after 1 s)
    is on disk."""
    first_ns = event.data.get("first_issue_ns")
    return (
        event.kind == "progress"
        and event.pipeline == pipeline
        and first_ns is not None
        and time.monotonic_ns() - first_ns > 1.5e9
    )


def stage_exception(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Injected:
    doc = fault_spec({"type": "fail", "config": {"every": 2}})
    doc["pipelines"][0]["error_budget"] = 20
    figures.count("faults_injected", name)
    run_dir, ended_ns, watch = _in_process(doc, tmp_path)
    reason = "error budget exhausted: 20 failed queries (most often bad: InjectedFailureError"
    return Injected(run_dir, ended_ns, limit_s(doc), watch, reason, f"victim: failed: {reason}")


def _crashing_worker(mode: str, reason: str) -> Case:
    def case(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Injected:
        # query 300 arrives 1.5 s in: after the victim's first flush
        doc = fault_spec({"type": "fail", "config": {"at_query": 300, "mode": mode}}, 2.5)
        figures.count("faults_injected", name)
        run_dir, ended_ns, watch = _in_process(doc, tmp_path)
        return Injected(run_dir, ended_ns, limit_s(doc), watch, reason, f"victim: failed: {reason}")

    return case


def worker_sigkill(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Injected:
    """SIGKILL (what the OOM killer sends) to the victim's worker after its first flush."""
    doc = fault_spec({"type": "sleep", "config": {"ms": 1}}, duration_s=2.5)
    killed: list[int] = []

    def kill_victim(event: ProgressEvent) -> None:
        if not killed and _after_first_flush(event):
            os.kill(int(event.data["pid"]), signal.SIGKILL)
            killed.append(int(event.data["pid"]))
            figures.count("faults_injected", name)

    run_dir, ended_ns, watch = _in_process(doc, tmp_path, kill_victim)
    assert killed
    flushed = query_rows(run_dir)
    assert (flushed[flushed.pipeline == "victim"].status == "ok").sum() > 0  # rows kept
    reason = "worker killed by SIGKILL (possibly the OOM killer)"
    return Injected(run_dir, ended_ns, limit_s(doc), watch, reason, f"victim: failed: {reason}")


def stage_hang(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Injected:
    """A stage that never returns: the pipeline ends at its timeout_s (2 s here), the hung
    query and the backlog behind it as `timeout`."""
    doc = fault_spec({"type": "fail", "config": {"at_query": 5, "mode": "hang"}}, timeout_s=2)
    figures.count("faults_injected", name)
    run_dir, ended_ns, watch = _in_process(doc, tmp_path)
    (hung,) = query_rows(run_dir).query("pipeline == 'victim' and query_id == 5").status
    assert hung == "timeout"
    (victim,) = [r for r in manifest(run_dir)["results"] if r["pipeline"] == "victim"]
    assert victim["status"] == "timeout"
    reason = "queries still running after 2.0 s"
    return Injected(run_dir, ended_ns, limit_s(doc), watch, reason, reason)


def host_sampler_killed(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Injected:
    """SIGKILL to the host sampler process in the middle of the load window."""
    doc = fault_spec({"type": "noop"}, duration_s=2.5)
    workers: set[int] = set()
    killed: list[int] = []
    with ProcessWatch(os.getpid()) as watch:

        def kill_sampler(event: ProgressEvent) -> None:
            if event.data.get("pid"):
                workers.add(int(event.data["pid"]))
            if killed or len(workers) < 2 or not _after_first_flush(event):
                return
            (sampler,) = spawned_children(watch, workers)  # the only other spawned child
            sampler.kill()
            killed.append(sampler.pid)
            figures.count("faults_injected", name)

        result = run(doc, tmp_path / "runs", progress=kill_sampler)
    assert killed
    return Injected(
        result.run_dir,
        time.monotonic_ns(),
        limit_s(doc),
        watch,
        "collobench:host-sampler exited with code -9",
        "host telemetry gap of",
    )


def _fake_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **device: object) -> Path:
    """One scripted GPU (fake NVML) for the spawned samplers of this test, whose scripted
    events count from when the returned file is created (`events_after_file`)."""
    trigger = tmp_path / "gpu-events-start"
    script = tmp_path / "gpu.json"
    device = {"uuid": "GPU-fake-0", "events_after_file": str(trigger), **device}
    script.write_text(json.dumps({"devices": [device]}))
    monkeypatch.setenv("COLLOBENCH_FAKE_NVML", str(script))
    return trigger


def _gpu_fault_run(
    doc: dict[str, Any], tmp_path: Path, trigger: Path
) -> tuple[Path, int, ProcessWatch]:
    """Run `doc`, starting the fake GPU's scripted events once the victim has flushed."""

    def start_events(event: ProgressEvent) -> None:
        if not trigger.exists() and _after_first_flush(event):
            trigger.touch()

    return _in_process(doc, tmp_path, start_events)


def gpu_sampler_raises(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Injected:
    """The fake NVML raises an error no NVML call would (RuntimeError) once the victim has
    flushed: the GPU sampler process crashes mid-window."""
    trigger = _fake_gpu(tmp_path, monkeypatch, power_w=120, crash_at_s=0)
    doc = fault_spec({"type": "noop"}, duration_s=2.5)
    doc["telemetry"]["gpu"] = {"period_ms": 20}
    figures.count("faults_injected", name)
    run_dir, ended_ns, watch = _gpu_fault_run(doc, tmp_path, trigger)
    reason = "collobench:gpu0-sampler: sampler crashed: RuntimeError('fake NVML crashed in"
    return Injected(run_dir, ended_ns, limit_s(doc), watch, reason, "gpu 0 telemetry gap of")


def gpu_lost_and_counter_reset(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Injected:
    """Mid-window, the fake GPU's energy counter restarts at 0, and 0.2 s later the GPU is
    lost."""
    trigger = _fake_gpu(tmp_path, monkeypatch, power_w=120, energy_resets_at_s=[0], lost_at_s=0.2)
    doc = fault_spec({"type": "noop"}, duration_s=2.5)
    doc["telemetry"]["gpu"] = {"period_ms": 20}
    figures.count("faults_injected", name)
    run_dir, ended_ns, watch = _gpu_fault_run(doc, tmp_path, trigger)
    warnings = "\n".join(manifest(run_dir)["warnings"])
    assert "energy counter reset 1 time(s)" in warnings
    return Injected(
        run_dir, ended_ns, limit_s(doc), watch, "GPU 0 lost after", "gpu 0 telemetry gap of"
    )


def disk_full(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Injected:
    """The victim's disk fills after its first chunk of each table (an injecting writer,
    COLLOBENCH_FAULT_DISK_FULL): its next flush leaves half a file and raises ENOSPC."""
    monkeypatch.setenv("COLLOBENCH_FAULT_DISK_FULL", "-victim:1")
    doc = fault_spec({"type": "noop"}, duration_s=2.5)
    figures.count("faults_injected", name)
    run_dir, ended_ns, watch = _in_process(doc, tmp_path)
    flushed = query_rows(run_dir)
    assert (flushed.pipeline == "victim").sum() > 0  # the chunk written before the disk filled
    assert not list(run_dir.glob("parts/**/*.tmp"))  # the half-written chunk was cleaned up
    reason = "victim: failed: recording failed: stage_events: OSError: [Errno 28] No space left"
    return Injected(run_dir, ended_ns, limit_s(doc), watch, reason, reason)


def prepare_raises(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Injected:
    """A real model stage (transformers.embed) whose hub model cannot be had: no network, and
    HF offline mode; it raises in `prepare`, before the barrier."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    doc = fault_spec({"type": "transformers.embed", "config": {"model": "hf:collobench/absent"}})
    figures.count("faults_injected", name)
    run_dir, ended_ns, watch = _in_process(doc, tmp_path)
    (victim,) = [r for r in manifest(run_dir)["results"] if r["pipeline"] == "victim"]
    assert "prepare" in victim["traceback"]
    reason = "victim: failed: ArtifactError: hub model 'collobench/absent' is not available"
    return Injected(run_dir, ended_ns, limit_s(doc), watch, reason, reason, victim_rows=False)


def _cli_fault(name: str, tmp_path: Path, sig: int) -> Injected:
    """A CLI run in a subprocess hit by `sig` once both pipelines have flushed rows: to the
    launcher alone (SIGTERM), or to the launcher and every descendant, one kill each
    (SIGKILL: nothing of collobench gets to react)."""
    doc = fault_spec({"type": "sleep", "config": {"ms": 1}}, duration_s=4)
    process, out = start_cli_run(doc, tmp_path)
    try:
        with ProcessWatch(process.pid) as watch:
            run_dir = wait_for_flushed_rows(out, {"victim", "survivor"})
            targets = [process.pid]
            if sig == signal.SIGKILL:
                targets += [child.pid for child in watch.snapshot()]
            for pid in targets:
                os.kill(pid, sig)
            figures.count("faults_injected", name)
            _, stderr = process.communicate(timeout=limit_s(doc))
            ended_ns = time.monotonic_ns()
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return Injected(run_dir, ended_ns, limit_s(doc), watch, "", "", survivor=None, console=stderr)


def launcher_sigterm(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Injected:
    injected = _cli_fault(name, tmp_path, signal.SIGTERM)
    assert "interrupted; kept what was measured" in injected.console
    assert "Traceback" not in injected.console
    reason = "victim: interrupted: interrupted"
    injected.reason, injected.check = reason, "run status is interrupted"
    return injected


def process_tree_sigkill(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Injected:
    injected = _cli_fault(name, tmp_path, signal.SIGKILL)
    # Nothing ran to say why: the manifest written at the start says the run was still going,
    # and the rows flushed before the kill are what is left.
    injected.reason, injected.check = "run status running", "run status is running"
    return injected


CASES: dict[str, Case] = {
    "stage_exception": stage_exception,
    "worker_sys_exit": _crashing_worker("exit", "worker exited with code 3 before reporting"),
    "worker_sigkill": worker_sigkill,
    "worker_segfault": _crashing_worker("segfault", "worker killed by SIGSEGV"),
    "stage_hang": stage_hang,
    "host_sampler_killed": host_sampler_killed,
    "gpu_sampler_raises": gpu_sampler_raises,
    "gpu_lost_and_counter_reset": gpu_lost_and_counter_reset,
    "disk_full": disk_full,
    "prepare_raises": prepare_raises,
    "launcher_sigterm": launcher_sigterm,
    "process_tree_sigkill": process_tree_sigkill,
}


def assert_survived(name: str, injected: Injected, tmp_path: Path) -> None:
    """The four assertions every fault case makes (see the module docstring)."""
    run_dir = injected.run_dir
    queries = query_rows(run_dir)
    # 1. bounded time: from the first scheduled arrival (the load's start; the one monotonic
    # clock of the host) to the run's end
    took_s = (injected.ended_ns - int(queries.scheduled_ns.min())) / 1e9
    assert 0 < took_s <= injected.limit_s, (took_s, injected.limit_s)
    # 2. no process left
    assert injected.watch.seen, "the watch saw none of the run's processes"
    left = injected.watch.left()
    figures.count("processes_left", name, len(left))
    assert not left, [" ".join(p.cmdline())[:120] for p in left]
    # 3. rows complete and loadable
    data = manifest(run_dir)
    assert set(queries.status) <= QUERY_STATUSES
    assert "survivor" in set(queries.pipeline)
    assert ("victim" in set(queries.pipeline)) == injected.victim_rows
    if injected.survivor is not None:
        (survivor,) = [r for r in data["results"] if r["pipeline"] == injected.survivor]
        assert (survivor["status"], survivor["error"]) == ("ok", None)
        mine = queries[queries.pipeline == injected.survivor]
        assert mine.status.eq("ok").sum() == survivor["ok"] > 0
    with fresh_warehouse(tmp_path / "fault.duckdb", run_dir) as connection:
        loaded = dict(
            connection.execute(
                "SELECT pipeline, count(*) FROM queries WHERE run_id = ? GROUP BY pipeline",
                [data["run_id"]],
            ).fetchall()
        )
        assert loaded == queries.groupby("pipeline").size().to_dict()
        # 4. the failure and its reason: manifest, warehouse, Dagster check
        assert injected.reason in manifest_reasons(run_dir)
        assert injected.reason in warehouse_reasons(connection, data["run_id"])
        passed, said = validity(connection, data["run_id"])
    assert not passed
    assert injected.check in said, said


@pytest.mark.spawns
@pytest.mark.parametrize("name", list(CASES))
def test_fault_is_contained_and_reported(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    injected = CASES[name](name, tmp_path, monkeypatch)
    assert_survived(name, injected, tmp_path)
    figures.count("faults_survived", name)


def _reader(db: Path) -> subprocess.Popen[str]:
    """Another process holding a read-only DuckDB connection to `db` until its stdin closes."""
    code = (
        "import duckdb, sys\n"
        f"connection = duckdb.connect({str(db)!r}, read_only=True)\n"
        "print('open', flush=True)\n"
        "sys.stdin.read()\n"
    )
    reader = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert reader.stdout is not None and reader.stdout.readline() == "open\n"
    return reader


def _collobench_load(run_dir: Path, db: Path, wait_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stages.cli", "load", str(run_dir), "--db", str(db)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=wait_s + 60,
        env={**os.environ, "COLLOBENCH_WAREHOUSE_WAIT_S": str(wait_s)},
        check=False,
    )


@pytest.mark.spawns
def test_a_load_into_a_warehouse_held_by_a_reader_fails_cleanly_then_succeeds(
    tmp_path: Path,
) -> None:
    """A second process holds the warehouse read-only while `collobench load` runs: the load
    waits its COLLOBENCH_WAREHOUSE_WAIT_S, then exits 2 with one line naming the holder; the
    warehouse keeps what it had; once the reader leaves, the same load succeeds."""
    name = "warehouse_locked_by_reader"
    doc = fault_spec({"type": "fail", "config": {"at_query": 100, "mode": "exit"}}, duration_s=1)
    run_dir, _, _ = _in_process(doc, tmp_path)
    db = tmp_path / "results.duckdb"
    load_runs([run_dir], db)
    rows = len(query_rows(run_dir))
    reader = _reader(db)
    figures.count("faults_injected", name)
    try:
        started = time.monotonic()
        refused = _collobench_load(run_dir, db, 2)
        wall_s = time.monotonic() - started
    finally:
        assert reader.stdin is not None
        reader.stdin.close()
        reader.wait(timeout=10)
    # 1. bounded: the wait (2 s) plus the CLI's start-up, within the 10 s
    assert wall_s <= 2 + 10
    # 4. the reason: exit 2, one line naming the process that holds the file, no traceback
    assert refused.returncode == 2, refused.stderr
    lines = [line for line in refused.stderr.splitlines() if "waiting" not in line]
    assert len(lines) == 1 and f"pid {reader.pid}" in lines[0], refused.stderr
    assert "has the warehouse open" in lines[0] and "Traceback" not in refused.stderr
    # 2. nothing left: the reader ended, the load ended (subprocess.run waited for it)
    assert reader.poll() is not None
    figures.count("processes_left", name, 0)
    # 3. never corrupt: the run loaded before is intact, and the same load now succeeds
    connection = connect_read_only(db)
    try:
        assert connection.execute("SELECT count(*) FROM queries").fetchone() == (rows,)
    finally:
        connection.close()
    done = _collobench_load(run_dir, db, 5)
    assert done.returncode == 0, done.stderr
    assert f"replaced {run_dir.name} (failed)" in done.stdout
    connection = connect_read_only(db)
    try:
        assert connection.execute("SELECT count(*) FROM queries").fetchone() == (rows,)
        passed, said = validity(connection, run_dir.name)
    finally:
        connection.close()
    assert not passed and "worker exited with code 3" in said
    figures.count("faults_survived", name)


@pytest.mark.parametrize(
    "stage",
    [{"type": "noop"}, {"type": "fail", "config": {"every": 2}}],
    ids=["last-chunk", "errors-table"],
)
def test_a_disk_full_on_the_last_flush_fails_the_phase(
    stage: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last rows (and the errors table) are written after the load stops: a disk that is
    full by then still fails the phase with the reason, instead of an `ok` with rows missing
    (the status used to be decided before the writer had written them) or an OSError out of
    the pipeline (the errors table was written unguarded)."""
    from stages.rundir.tables import DISK_FULL_ENV
    from stages.runtime.driver import run_pipeline
    from stages.spec.models import PipelineSpec

    monkeypatch.setenv(DISK_FULL_ENV, "-p:0")  # no chunk of pipeline p fits
    spec = PipelineSpec.model_validate(
        {
            "name": "p",
            "error_budget": None,
            "loadgen": {"type": "closed_loop", "max_queries": 50, "duration_s": 0.2},
            "stages": [{"id": "s", **stage}],
        }
    )
    result, _ = run_pipeline(spec, run_dir=tmp_path)
    assert result.status == "failed"
    assert result.error is not None and result.error.startswith("recording failed: ")
    assert "OSError: [Errno 28] No space left on device" in result.error
    assert not list(tmp_path.glob("parts/*/*.parquet"))

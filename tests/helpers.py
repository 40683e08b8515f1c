"""Test helpers: test-only stage types and small builders."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stages.collocation.launcher import RunOptions, run_benchmark
from stages.runtime.driver import prepare_load, run_load
from stages.runtime.pipeline import PipelineRuntime
from stages.runtime.query import Query
from stages.runtime.recorder import Recorder
from stages.runtime.registry import StageRegistry, default_registry, stage_type
from stages.runtime.stage import Route, Stage
from stages.spec.models import PipelineSpec
from stages.validation.loading import validate_document
from tests.paths import REPO as REPO  # re-exported: many tests import REPO from here

default_registry()


@stage_type("test.tag")
class TagStage(Stage):
    """Test stage: payload becomes (stage id, query id, upstream payload), so a join that
    mixed two queries would be visible in the merged payload."""

    def run(self, query: Query) -> Route:
        query.payload = (self.context.stage_id, query.query_id, query.payload)
        return None


def pipeline_doc(stages: list[dict[str, Any]], **loadgen: Any) -> dict[str, Any]:
    return {"name": "p", "loadgen": loadgen, "stages": stages}


def registry_with(extra: dict[str, type[Stage[Any]]]) -> StageRegistry:
    """The default stage types plus `extra` (name -> class), without a reinstall of the entry
    points."""
    known = StageRegistry()
    for name in default_registry().names():
        known.register(name, default_registry().get(name))
    for name, stage_class in extra.items():
        known.register(name, stage_class)
    return known


def run_in_process(spec: PipelineSpec, registry: StageRegistry) -> tuple[PipelineRuntime, Recorder]:
    """Prepare, start and drive `spec` in this process, its rows kept in memory; the runtime
    and the closed recorder."""
    recorder = Recorder(None, {}, [stage.id for stage in spec.stages], "x")
    runtime = PipelineRuntime(spec, recorder, registry=registry)
    runtime.prepare()
    runtime.start()
    run_load(runtime, prepare_load(runtime, 0), time.monotonic_ns())
    recorder.close()
    return runtime, recorder


def rows(recorder: Any, table: str) -> list[dict[str, Any]]:
    """A recorder table (column lists) as row dicts."""
    columns = recorder.table(table)
    if not columns:
        return []
    return [
        dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)
    ]


def spec_doc(victim_stage: dict[str, Any], **victim_loadgen: Any) -> dict[str, Any]:
    """A two-pipeline spec: `victim` runs `victim_stage` after a noop, `survivor` is healthy."""
    loadgen = {"type": "closed_loop", "duration_s": 1.5, "timeout_s": 20, **victim_loadgen}
    return {
        "name": "faults",
        "collocation": {"solo_baselines": False},
        "telemetry": {"host": {"period_ms": 50}},
        "pipelines": [
            {
                "name": "victim",
                "loadgen": loadgen,
                "stages": [
                    {"id": "pre", "type": "noop", "outputs": ["bad"]},
                    {"id": "bad", **victim_stage},
                ],
            },
            {
                "name": "survivor",
                "loadgen": {"type": "server", "rate": 200, "duration_s": 1.5},
                "stages": [{"id": "ok", "type": "noop"}],
            },
        ],
    }


def run(doc: dict[str, Any], tmp_path: Path, **options: Any) -> Any:
    """Validate a spec document and run it with the launcher (run directories under tmp_path)."""
    loaded = validate_document(doc, "test")
    return run_benchmark(
        loaded, RunOptions(out_dir=tmp_path, cache_dir=tmp_path / "cache", **options)
    )


LOOPBACK = ("127.0.0.1", "::1")


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket listening in process `pid` and its descendants: what
    a server started by the project exposes (the loopback addresses only, unless the user said
    otherwise)."""
    import psutil

    root = psutil.Process(pid)
    found = set()
    for process in [root, *root.children(recursive=True)]:
        try:
            sockets = process.net_connections(kind="tcp")
        except psutil.Error:
            continue  # ended meanwhile
        for conn in sockets:
            if conn.status == psutil.CONN_LISTEN:
                found.add((conn.laddr.ip, conn.laddr.port))
    return found


@contextlib.contextmanager
def foreign_process() -> Iterator[int]:
    """The pid of a process that is no descendant of ours or of a benchmark's (a stranger's job
    on the GPU): a `sleep` its shell left behind, reparented away; killed afterwards."""
    shell = subprocess.run(
        ["sh", "-c", "sleep 120 >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(shell.stdout)
    try:
        yield pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

"""The worker process of one pipeline in one phase: placement, prepare, barrier, load, report.

Started by the launcher with the `spawn` start method (never fork: a forked child of a process
that touched CUDA is broken). It talks to the launcher over a pipe:
worker -> launcher: {"kind": "ready"}, {"kind": "progress", ...}, {"kind": "done", ...},
{"kind": "failed", "error": ...}; launcher -> worker: {"kind": "start", "start_ns": ...}.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType
from typing import Any

from stages.collocation.lifetime import die_with_parent

PROGRESS_PERIOD_S = 0.5


@dataclass(frozen=True)
class WorkerTask:
    """Everything a worker needs; plain data so it pickles across `spawn`."""

    run_dir: str
    run_id: str
    trial: int
    phase: str
    pipeline: dict[str, Any]  # PipelineSpec as JSON-able dict
    spec_seed: int
    collocation_mode: str
    cache_dir: str


class Interrupted(Exception):
    """SIGTERM reached the worker: stop issuing, keep what was measured."""


def _send(connection: Connection, message: dict[str, Any]) -> None:
    """Report to the launcher; if it is gone (killed), the rows on disk are what remains."""
    with contextlib.suppress(OSError):
        connection.send(message)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(f"received signal {signal.Signals(signum).name}")


def worker_main(task: WorkerTask, connection: Connection) -> None:
    """Process entry point (must stay importable without torch)."""
    # Ctrl-C goes to the whole foreground process group; the launcher alone decides how its
    # children stop, so workers ignore SIGINT and stop on SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    # Workers stay in the launcher's process group (the launcher leads it when started from a
    # shell, or by Dagster Pipes in a new session); PDEATHSIG covers a launcher that dies.
    die_with_parent()
    exit_code = 0
    try:
        exit_code = _run(task, connection)
    except Interrupted as interrupted:
        _send(connection, {"kind": "failed", "error": f"interrupted: {interrupted}"})
        exit_code = 130
    except BaseException as error:
        summary = f"{type(error).__name__}: {error}"
        _send(
            connection,
            {"kind": "failed", "error": summary, "traceback": traceback.format_exc(limit=20)},
        )
        exit_code = 1
    finally:
        connection.close()
    sys.exit(exit_code)


def _run(task: WorkerTask, connection: Connection) -> int:
    # Placement first: nothing below may have initialised torch or CUDA yet.
    from stages.collocation.placement import apply_cpu_affinity, torch_device, worker_environment
    from stages.spec.models import PipelineSpec

    pipeline = PipelineSpec.model_validate(task.pipeline)
    os.environ.update(worker_environment(pipeline, task.collocation_mode))
    apply_cpu_affinity(pipeline.placement.cpus)
    pipeline = pipeline.model_copy(update={"device": torch_device(pipeline, task.collocation_mode)})

    from stages.runtime.driver import arrival_seed, prepare_load, run_load
    from stages.runtime.pipeline import PipelineRuntime
    from stages.runtime.recorder import Recorder
    from stages.runtime.seeds import derive_seed

    keys = {
        "run_id": task.run_id,
        "trial": task.trial,
        "phase": task.phase,
        "pipeline": pipeline.name,
    }
    recorder = Recorder(
        Path(task.run_dir),
        keys,
        [stage.id for stage in pipeline.stages],
        label=f"t{task.trial}-{task.phase}-{pipeline.name}",
    )
    runtime = PipelineRuntime(
        pipeline,
        recorder,
        seed=derive_seed(task.spec_seed, "stages", pipeline.name, task.trial),
        cache_dir=Path(task.cache_dir),
    )
    try:
        runtime.prepare()
        if pipeline.placement.threads is not None and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(pipeline.placement.threads)
        scenario = prepare_load(runtime, arrival_seed(task.spec_seed, pipeline.name, task.trial))
        runtime.start()
        connection.send({"kind": "ready", "pid": os.getpid()})
        message = connection.recv()
        if message.get("kind") != "start":
            raise RuntimeError(f"expected a start message, got {message!r}")
        start_ns = int(message["start_ns"])
        reporter = _ProgressReporter(runtime, connection)
        reporter.start()
        try:
            result = run_load(runtime, scenario, start_ns)
        except Interrupted as interrupted:
            # Keep everything measured so far: stop quickly, flush, report as failed.
            runtime.finish(time.monotonic_ns() + 1_000_000_000, recorder.buffer())
            reporter.stop()
            recorder.close()
            _send(
                connection,
                {
                    "kind": "done",
                    "status": "failed",
                    "error": f"interrupted: {interrupted}",
                    **_summary(runtime),
                },
            )
            return 130
        reporter.stop()
    finally:
        recorder.close()
    _send(
        connection,
        {
            "kind": "done",
            "status": result.status,
            "error": result.error,
            "stopped_by": result.outcome.stopped_by,
            "not_issued": result.outcome.not_issued,
            "leaked_threads": result.leaked_threads,
            **_summary(runtime),
        },
    )
    return 0


def _summary(runtime: Any) -> dict[str, Any]:
    counters = runtime.counters
    return {
        "issued": counters.issued,
        "ok": counters.ok,
        "errors": counters.errors,
        "dropped": counters.dropped,
        "timeouts": counters.timeouts,
        "samples_ok": counters.samples_ok,
        "first_issue_ns": counters.first_issue_ns,
        "last_completed_ns": counters.last_completed_ns,
        "live_p99_ms": counters.p99_ms(),
    }


class _ProgressReporter:
    """Sends live counters to the launcher twice a second, off the measured threads' path."""

    def __init__(self, runtime: Any, connection: Connection) -> None:
        self._runtime = runtime
        self._connection = connection
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopped.wait(PROGRESS_PERIOD_S):
            with self._lock:
                if self._stopped.is_set():
                    return
                try:
                    self._connection.send({"kind": "progress", **_summary(self._runtime)})
                except OSError:
                    return

    def stop(self) -> None:
        with self._lock:  # never interleave a progress message with the final one
            self._stopped.set()
        self._thread.join(timeout=2)

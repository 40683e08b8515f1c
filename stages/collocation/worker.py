"""The worker process of one pipeline in one phase: placement, prepare, barrier, load, report.

Started by the launcher with the `spawn` start method (never fork: a forked child of a process
that touched CUDA is broken). It talks to the launcher over a pipe in the messages of
`stages.collocation.protocol`: it sends `Ready`, waits for `Start`, sends `Progress` during
the load window and ends with `Done` (or `Failed` when it raised). A resident worker (an A/B
session's, `stages.collocation.resident_workers`) then waits for a `NextTask` and runs that
run's window the same way, its imports and caches warm; it exits when the launcher closes the
pipe.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from stages.collocation import protocol
from stages.collocation.protocol import Done, Failed, Progress, Ready, Start
from stages.contracts.errors import RunInterruptedError
from stages.process_lifetime import die_with_parent

if TYPE_CHECKING:
    from stages.runtime.pipeline import PipelineRuntime
    from stages.runtime.recorder import Recorder
    from stages.spec.models import PipelineSpec

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
    service_urls: dict[str, str] = field(default_factory=dict)
    """The spec's services up for this phase: name -> base URL (a `per_phase` service gets a
    new port each phase); every stage's `StageContext.service_urls`."""


class Interrupted(RunInterruptedError):
    """SIGTERM reached the worker: stop issuing, keep what was measured."""


def _send(connection: Connection, message: protocol.Message) -> None:
    """Report to the launcher; if it is gone (killed), the rows on disk are what remains."""
    with contextlib.suppress(OSError):
        protocol.send(connection, message)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(f"received signal {signal.Signals(signum).name}")


def worker_main(task: WorkerTask, connection: Connection, resident: bool = False) -> None:
    """Process entry point (must stay importable without torch). `resident`: after each load
    window, wait for the next task instead of exiting."""
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
        while resident and exit_code == 0:
            next_task = _await_next_task(connection)
            if next_task is None:  # the launcher closed the pipe: the session ended
                break
            gc.collect()  # the last window's runtime, outside every window
            exit_code = _run(next_task, connection)
    except Interrupted as interrupted:
        _send(connection, Failed(error=f"interrupted: {interrupted}", traceback=None))
        exit_code = 130
    except BaseException as error:
        summary = f"{type(error).__name__}: {error}"
        _send(connection, Failed(error=summary, traceback=traceback.format_exc(limit=20)))
        exit_code = 1
    finally:
        connection.close()
    sys.exit(exit_code)


def _run(task: WorkerTask, connection: Connection) -> int:
    # Placement first: nothing below may have initialised torch or CUDA yet.
    pipeline = _placed_pipeline(task)
    # numpy only now: its thread pools size themselves from the placement's variables.
    from stages.rundir.arrow_pandas import skip_pandas_check

    skip_pandas_check()  # a stage that imports pandas itself keeps it
    from stages.runtime.driver import arrival_seed, prepare_load, run_load
    from stages.runtime.os_threads import name_os_thread

    recorder = _recorder(task, pipeline)
    runtime = _runtime(task, pipeline, recorder)
    try:
        runtime.prepare()
        if pipeline.placement.threads is not None and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(pipeline.placement.threads)
        scenario = prepare_load(runtime, arrival_seed(task.spec_seed, pipeline.name, task.trial))
        runtime.start()
        start_ns = _await_start(connection)
        name_os_thread("issuer")  # the load generator issues from this thread (os_threads)
        reporter = _ProgressReporter(runtime, connection)
        reporter.start()
        try:
            result = run_load(runtime, scenario, start_ns)
        except Interrupted as interrupted:
            # Keep everything measured so far: stop quickly, flush, report as failed.
            runtime.finish(time.monotonic_ns() + 1_000_000_000, recorder.buffer())
            reporter.stop()
            recorder.close()
            _send(connection, _interrupted_done(runtime, interrupted))
            return 130
        reporter.stop()
    finally:
        recorder.close()
    done = Done(
        status=result.status,
        error=result.error,
        stopped_by=result.outcome.stopped_by,
        not_issued=result.outcome.not_issued,
        leaked_threads=result.leaked_threads,
        counters=runtime.counters,
        stage_warnings=runtime.stage_warnings.records(),
    )
    _send(connection, done)
    return 0


def _placed_pipeline(task: WorkerTask) -> PipelineSpec:
    """The task's pipeline, with this process placed for it (environment, CPU affinity,
    scheduling policy) and its device as torch will see it once CUDA_VISIBLE_DEVICES narrowed
    the view."""
    from stages.collocation.placement import (
        apply_cpu_affinity,
        apply_scheduling_policy,
        torch_device,
        worker_environment,
    )
    from stages.spec.models import PipelineSpec

    pipeline = PipelineSpec.model_validate(task.pipeline)
    os.environ.update(worker_environment(pipeline, task.collocation_mode))
    apply_cpu_affinity(pipeline.placement.cpus)
    apply_scheduling_policy(pipeline.placement.scheduling_policy)  # before any thread starts
    return pipeline.model_copy(update={"device": torch_device(pipeline, task.collocation_mode)})


def _recorder(task: WorkerTask, pipeline: PipelineSpec) -> Recorder:
    from stages.runtime.recorder import Recorder

    keys = {
        "run_id": task.run_id,
        "trial": task.trial,
        "phase": task.phase,
        "pipeline": pipeline.name,
    }
    return Recorder(
        Path(task.run_dir),
        keys,
        [stage.id for stage in pipeline.stages],
        label=f"t{task.trial}-{task.phase}-{pipeline.name}",
        slo_ms=pipeline.loadgen.slo_ms,
    )


def _runtime(task: WorkerTask, pipeline: PipelineSpec, recorder: Recorder) -> PipelineRuntime:
    from stages.runtime.pipeline import PipelineRuntime
    from stages.runtime.seeds import derive_seed

    return PipelineRuntime(
        pipeline,
        recorder,
        seed=derive_seed(task.spec_seed, "stages", pipeline.name, task.trial),
        cache_dir=Path(task.cache_dir),
        service_urls=task.service_urls,
    )


def _await_start(connection: Connection) -> int:
    """Tell the launcher this worker is ready; the common start instant it answers with."""
    protocol.send(connection, Ready(pid=os.getpid()))
    return protocol.expect(protocol.receive(connection), Start).start_ns


def _await_next_task(connection: Connection) -> WorkerTask | None:
    """A resident worker's next task; None when the launcher closed the pipe."""
    try:
        message = protocol.receive(connection)
    except (EOFError, OSError):
        return None
    return WorkerTask(**protocol.expect(message, protocol.NextTask).task)


def _interrupted_done(runtime: PipelineRuntime, interrupted: Interrupted) -> Done:
    """The final report of a load window cut short by SIGTERM (what was measured is kept)."""
    return Done(
        status="failed",
        error=f"interrupted: {interrupted}",
        stopped_by=None,
        not_issued=0,
        leaked_threads=[],
        counters=runtime.counters,
        stage_warnings=runtime.stage_warnings.records(),
    )


class _ProgressReporter:
    """Sends live counters to the launcher twice a second, off the measured threads' path: at
    a lower priority, and between two open-loop issues (the recorder's `issue_schedule`), as
    the writer's slices are."""

    def __init__(self, runtime: PipelineRuntime, connection: Connection) -> None:
        self._runtime = runtime
        self._connection = connection
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        from stages.runtime.os_threads import lower_priority, name_os_thread

        name_os_thread("progress")
        lower_priority()
        issue_schedule = self._runtime.recorder.issue_schedule
        while not self._stopped.wait(PROGRESS_PERIOD_S):
            issue_schedule.wait_for_gap()
            with self._lock:
                if self._stopped.is_set():
                    return
                try:
                    protocol.send(self._connection, Progress(self._runtime.counters))
                except OSError:
                    return

    def stop(self) -> None:
        with self._lock:  # never interleave a progress message with the final one
            self._stopped.set()
        self._thread.join(timeout=2)

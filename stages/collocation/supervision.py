"""Worker supervision: spawn one worker process per pipeline, wait on its pipe and its process
sentinel, turn its protocol messages into its outcome, and stop it (SIGTERM, then SIGKILL)
when it hangs; a worker that dies says why in its outcome, the others carry on."""

from __future__ import annotations

import multiprocessing.connection
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import Any

from stages.collocation import protocol
from stages.collocation.protocol import Done, Failed, Message, Progress, Ready
from stages.collocation.resident_workers import ResidentWorkers
from stages.collocation.results import PipelineOutcome, ProgressEvent
from stages.collocation.worker import WorkerTask, worker_main
from stages.contracts.warnings import stage_warning

PREPARE_TIMEOUT_S = 900.0  # loading a large model can take minutes
TERMINATE_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this long
AWAIT_POLL_S = 0.5  # how often a load window's wait checks deadlines and dead services


class WorkerHandle:
    """Launcher-side state of one worker process."""

    def __init__(
        self, outcome: PipelineOutcome, process: SpawnProcess, connection: Connection
    ) -> None:
        self.outcome = outcome
        self.process = process
        self.connection = connection
        self.ready = False
        self.done = False
        self.deadline_ns: int | None = None

    @property
    def name(self) -> str:
        return self.outcome.pipeline


def death_reason(exit_code: int | None) -> str:
    """Why a worker that never sent its final report is gone, from its exit code."""
    if exit_code is None:
        return "worker did not exit"
    if exit_code < 0:
        name = signal.Signals(-exit_code).name
        hint = " (possibly the OOM killer)" if name == "SIGKILL" else ""
        return f"worker killed by {name}{hint}"
    return f"worker exited with code {exit_code} before reporting"


class Supervisor:
    """Runs and watches the workers of a run; reports through `emit` and `warnings`."""

    def __init__(
        self,
        context: SpawnContext,
        emit: Callable[[ProgressEvent], None],
        warnings: list[str],
        resident: ResidentWorkers | None = None,
    ) -> None:
        """`resident`: workers kept between runs (an A/B session's); None: one per phase."""
        self._context = context
        self._emit = emit
        self._warnings = warnings
        self._resident = resident

    def spawn(self, task: WorkerTask) -> WorkerHandle:
        """The task's worker: the pipeline's resident one when there is one, else a new one."""
        pipeline = task.pipeline["name"]
        held = self._resident.hand_over(task) if self._resident is not None else None
        if held is not None:
            process, parent_end = held
        else:
            parent_end, child_end = self._context.Pipe(duplex=True)
            process = self._context.Process(
                target=worker_main,
                args=(task, child_end, self._resident is not None),
                name=f"collobench:{pipeline}",
            )
            process.start()
            child_end.close()
        outcome = PipelineOutcome(task.trial, task.phase, pipeline, pid=process.pid)
        return WorkerHandle(outcome, process, parent_end)

    def await_ready(self, workers: list[WorkerHandle]) -> None:
        """Until every worker prepared or ended; one still preparing after
        PREPARE_TIMEOUT_S is terminated."""
        deadline = time.monotonic() + PREPARE_TIMEOUT_S
        while any(not w.ready and not w.done for w in workers):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for worker in workers:
                    if not worker.ready and not worker.done:
                        self.terminate(worker, f"prepare took over {PREPARE_TIMEOUT_S:.0f} s")
                return
            self.poll([w for w in workers if not w.ready], min(remaining, 1.0))

    def await_done(
        self, workers: list[WorkerHandle], must_stop: Callable[[], dict[str, str]] | None = None
    ) -> None:
        """Until every worker reported or ended; one past its deadline is terminated, and so
        is one `must_stop` names (pipeline -> reason: a service it uses died), failed with
        the reason. Both are checked every AWAIT_POLL_S."""
        while any(not w.done for w in workers):
            now_ns = time.monotonic_ns()
            stop = must_stop() if must_stop is not None else {}
            for worker in workers:
                if worker.done:
                    continue
                if worker.name in stop:
                    self.terminate(worker, stop[worker.name], status="failed")
                elif worker.deadline_ns and now_ns > worker.deadline_ns:
                    self.terminate(worker, "worker did not finish within timeout_s; terminated")
            self.poll(workers, AWAIT_POLL_S)

    def poll(self, workers: list[WorkerHandle], timeout_s: float) -> None:
        """Wait for messages or deaths of `workers`, handling whatever arrives."""
        waitables: dict[Any, WorkerHandle] = {}
        for worker in workers:
            if not worker.done:
                waitables[worker.connection] = worker
                waitables[worker.process.sentinel] = worker
        if not waitables:
            return
        for ready in multiprocessing.connection.wait(list(waitables), timeout=timeout_s):
            worker = waitables[ready]
            if ready is worker.connection:
                if not self._drain(worker):
                    self._mark_dead(worker)
            elif not worker.done:
                # Drain what it said before dying (its last messages may explain why).
                self._drain(worker)
                self._mark_dead(worker)

    def _drain(self, worker: WorkerHandle) -> bool:
        """Handle every message waiting on the worker's pipe; False when the pipe closed."""
        try:
            while worker.connection.poll():
                self._handle(worker, protocol.receive(worker.connection))
        except (EOFError, OSError):
            return False
        return True

    def _handle(self, worker: WorkerHandle, message: Message) -> None:
        outcome = worker.outcome
        if isinstance(message, Ready):
            worker.ready = True
        elif isinstance(message, Progress):
            outcome.counters = message.counters  # the worker's live counters, as reported
            self._emit_outcome(worker, "progress")
        elif isinstance(message, Done):
            worker.done = True
            outcome.record_done(message)
            if message.leaked_threads:
                self._warnings.append(
                    f"{outcome.pipeline} (trial {outcome.trial}, {outcome.phase}): stage "
                    f"threads still running at shutdown: {', '.join(message.leaked_threads)}"
                )
            self._warnings += [
                stage_warning(outcome.pipeline, outcome.trial, outcome.phase, record)
                for record in message.stage_warnings
            ]
            self._emit_outcome(worker)
        elif isinstance(message, Failed):
            worker.done = True
            outcome.record_failure(message)
            self._emit_outcome(worker)
        else:  # a worker never sends Start
            raise protocol.ProtocolError(f"{worker.name}: a worker sent {message!r}")

    def _emit_outcome(self, worker: WorkerHandle, kind: str = "done") -> None:
        outcome = worker.outcome
        self._emit(
            ProgressEvent(kind, outcome.trial, outcome.phase, outcome.pipeline, outcome.row())
        )

    def _mark_dead(self, worker: WorkerHandle) -> None:
        """The worker's pipe closed or its process ended; without a final report it failed."""
        if worker.done:
            return
        worker.process.join(timeout=TERMINATE_GRACE_S)
        worker.done = True
        worker.outcome.status = "failed"
        worker.outcome.exit_code = worker.process.exitcode
        worker.outcome.error = worker.outcome.error or death_reason(worker.process.exitcode)
        self._emit_outcome(worker)

    def terminate(self, worker: WorkerHandle, reason: str, status: str | None = None) -> None:
        """SIGTERM (the worker flushes and reports), then SIGKILL after a grace period; the
        outcome's status is `status`, else 'timeout' when the reason says timeout, else
        'failed'."""
        process = worker.process
        if process.is_alive():
            process.terminate()
            deadline = time.monotonic() + TERMINATE_GRACE_S
            while process.is_alive() and time.monotonic() < deadline:
                self.poll([worker], 0.2)
                if worker.done:
                    break
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(timeout=TERMINATE_GRACE_S)
        worker.done = True
        outcome = worker.outcome
        outcome.status = status or ("timeout" if "timeout" in reason else "failed")
        outcome.error = reason
        outcome.exit_code = process.exitcode
        self._emit_outcome(worker)

    def reap(self, worker: WorkerHandle) -> None:
        """Join the worker's process (killing it if it lingers) and close its pipe; a resident
        worker whose window ended ok is kept for its pipeline's next run instead."""
        resident = self._resident
        status = worker.outcome.status
        if resident is not None and resident.keep(
            worker.name, worker.process, worker.connection, status
        ):
            return
        if resident is not None:  # it waits for a next task: the closed pipe ends it
            worker.connection.close()
        worker.process.join(timeout=TERMINATE_GRACE_S)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join(timeout=TERMINATE_GRACE_S)
        worker.outcome.exit_code = worker.process.exitcode
        worker.connection.close()

"""Worker processes kept between the runs of one A/B session (`collobench ab`).

An A/B segment is a short ordinary run; spawning each pipeline's worker anew costs seconds per
segment (a Python start and the stage imports), which would spend most of a session's budget
outside the measured windows. A launcher given a `ResidentWorkers` hands a pipeline's next task
to that pipeline's idle worker instead (`protocol.NextTask`); the worker builds its runtime
afresh for the new run directory, with its imports and file caches warm. A worker whose window
did not end `ok` is never kept: the next run spawns a fresh one.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnProcess

from stages.collocation import protocol
from stages.collocation.worker import WorkerTask

CLOSE_GRACE_S = 5.0  # an idle worker exits on EOF at once; kill one that has not by then


class ResidentWorkers:
    """The idle workers of one session, one per pipeline name."""

    def __init__(self) -> None:
        self._idle: dict[str, tuple[SpawnProcess, Connection]] = {}
        self.reused = 0
        """How many tasks went to a resident worker (the rest spawned one)."""

    def hand_over(self, task: WorkerTask) -> tuple[SpawnProcess, Connection] | None:
        """The pipeline's idle worker, already sent `task`; None when there is none alive."""
        held = self._idle.pop(task.pipeline["name"], None)
        if held is None:
            return None
        process, connection = held
        if not process.is_alive():
            connection.close()
            return None
        try:
            protocol.send(connection, protocol.NextTask(task=asdict(task)))
        except OSError:
            self._close_one(process, connection)
            return None
        self.reused += 1
        return held

    def keep(
        self, pipeline: str, process: SpawnProcess, connection: Connection, status: str
    ) -> bool:
        """Keep a worker whose window ended `status` for the pipeline's next task; False (the
        caller reaps it) unless it ended ok and is alive."""
        if status != "ok" or not process.is_alive() or pipeline in self._idle:
            return False
        self._idle[pipeline] = (process, connection)
        return True

    def close(self) -> None:
        """End every idle worker: its pipe closes, it exits; killed if it lingers."""
        idle, self._idle = self._idle, {}
        for process, connection in idle.values():
            self._close_one(process, connection)

    @staticmethod
    def _close_one(process: SpawnProcess, connection: Connection) -> None:
        with contextlib.suppress(OSError):
            connection.close()
        process.join(timeout=CLOSE_GRACE_S)
        if process.is_alive():
            process.kill()
            process.join(timeout=CLOSE_GRACE_S)

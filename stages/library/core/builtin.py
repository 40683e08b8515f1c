"""Builtin stages: always registered; used by tests, overhead studies and fault injection."""

from __future__ import annotations

import asyncio
import ctypes
import fcntl
import hashlib
import itertools
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from stages.contracts.errors import RunFailedError
from stages.runtime.async_stage import AsyncStage, AsyncStageConfig
from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage, StageConfig


class NoopStage(Stage[StageConfig]):
    """Does nothing: measures the runtime's own per-stage cost."""

    def run(self, query: Query) -> Route:
        return None


class SleepConfig(StageConfig):
    ms: float = Field(1.0, ge=0, description="Milliseconds to sleep per query (releases the GIL).")


class SleepStage(Stage[SleepConfig]):
    """Sleeps: a stand-in for I/O or a device call that frees the CPU."""

    def run(self, query: Query) -> Route:
        time.sleep(self.config.ms / 1000.0)
        return None


class AsyncSleepConfig(AsyncStageConfig):
    ms: float = Field(1.0, ge=0, description="Milliseconds each visit awaits (asyncio.sleep).")


class AsyncSleepStage(AsyncStage[AsyncSleepConfig]):
    """Awaits a sleep: a stand-in for a request to a server, many in flight on one loop."""

    async def run_async(self, query: Query) -> Route:
        await asyncio.sleep(self.config.ms / 1000.0)
        return None


class BusyConfig(StageConfig):
    ms: float = Field(
        1.0,
        ge=0,
        description="Milliseconds of CPU work per query, as calibrated on this machine (once, "
        "at the first prepare; kept in the cache folder) on an uncontended core.",
    )
    release_gil: bool = Field(
        False,
        description="Hash with the GIL released (other threads run meanwhile) instead of "
        "holding it, as Python code does.",
    )


# hashlib releases the GIL while hashing inputs of 2 KiB and more, and holds it below that.
_HASH_BLOCK = bytes(16 * 1024)  # GIL released, ~10 us a call
_HELD_BLOCK = bytes(1024)  # GIL held, < 1 us a call
CALIBRATION_TRIALS = 5
CALIBRATION_TRIAL_NS = 30_000_000  # CPU time per trial


def _gil_held_work(iterations: int) -> None:
    """A Python loop that holds the GIL, as pure-Python work does (the interpreter hands it
    over between calls every switch interval). Its step is a small hash, not an empty
    iteration: an empty loop's rate varied by +-25% between processes on these VMs, a
    hash's by a few percent, so the work stays the same from one phase's process to the next."""
    sha256, block = hashlib.sha256, _HELD_BLOCK
    for _ in itertools.repeat(None, iterations):
        sha256(block)


def _gil_released_work(iterations: int) -> None:
    sha256, block = hashlib.sha256, _HASH_BLOCK
    for _ in itertools.repeat(None, iterations):
        sha256(block)


def _work_loop(release_gil: bool) -> Callable[[int], None]:
    return _gil_released_work if release_gil else _gil_held_work


def calibrate_iterations_per_ms(release_gil: bool) -> float:
    """Iterations of the work loop per millisecond of CPU: the median of a few ~30 ms trials.
    Timed on this thread's CPU clock, so time the thread spent preempted (another pipeline
    preparing on the same core) does not count, and a preempted trial cannot shrink the work.
    The median, not the best: on the CPU clock the fastest trial is an outlier on these VMs
    (up to 1.6x the typical rate), and the work calibrated from it would overshoot."""
    work = _work_loop(release_gil)
    iterations = 1
    while True:  # size a trial: double until one pass takes at least a millisecond
        began_ns = time.thread_time_ns()
        work(iterations)
        spent_ns = time.thread_time_ns() - began_ns
        if spent_ns >= 1_000_000:
            break
        iterations *= 2
    trial = max(1, iterations * CALIBRATION_TRIAL_NS // spent_ns)
    rates = []
    for _ in range(CALIBRATION_TRIALS):
        began_ns = time.thread_time_ns()
        work(trial)
        rates.append(trial * 1e6 / max(1, time.thread_time_ns() - began_ns))
    return statistics.median(rates)


CALIBRATION_FILE = "busy_calibration.json"


def machine_calibration(cache_dir: Path, release_gil: bool) -> float:
    """Iterations per millisecond for this machine and mode, calibrated once and kept in
    `cache_dir`: every phase, trial and run on the machine then does the same work per query
    (separate calibrations differ by a few percent, which would read as contention). A file
    lock makes collocated workers preparing at once share one calibration. Delete the file to
    calibrate again (after a hardware or Python change the key changes by itself)."""
    key = "|".join(
        (platform.node(), platform.processor() or platform.machine(), sys.version.split()[0])
    ) + ("|released" if release_gil else "|held")
    path = Path(cache_dir) / CALIBRATION_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            known = json.loads(path.read_text()) if path.exists() else {}
        except (OSError, ValueError):
            known = {}  # unreadable: calibrate again and rewrite it
        rate = known.get(key)
        if not isinstance(rate, int | float) or rate <= 0:
            rate = calibrate_iterations_per_ms(release_gil)
            known[key] = rate
            temporary = path.with_suffix(".tmp")
            temporary.write_text(json.dumps(known, indent=1))
            os.replace(temporary, path)
    return float(rate)


class BusyStage(Stage[BusyConfig]):
    """Performs a fixed amount of CPU work, calibrated at `prepare`: a stand-in for
    compute-bound work. A query that is preempted takes longer, so CPU contention shows in
    its service time (a wall-clock deadline would hide it)."""

    def prepare(self) -> None:
        release_gil = self.config.release_gil
        self._work = _work_loop(release_gil)
        ms = self.config.ms
        rate = machine_calibration(self.context.cache_dir, release_gil) if ms else 0.0
        self._iterations = round(ms * rate)

    def run(self, query: Query) -> Route:
        self._work(self._iterations)
        return None


class CopyConfig(StageConfig):
    bytes: int = Field(1024, ge=0, description="Size of the payload copied per query.")


class CopyStage(Stage[CopyConfig]):
    """Copies a payload of a given size: memory-bandwidth work, and a payload to pass on."""

    def prepare(self) -> None:
        self._template = bytearray(self.config.bytes)

    def run(self, query: Query) -> Route:
        query.payload = bytearray(self._template)
        return None


FailMode = Literal["raise", "exit", "segfault", "hang"]


class FailConfig(StageConfig):
    at_query: int | None = Field(None, ge=0, description="Fail on this query id.")
    every: int | None = Field(None, ge=1, description="Fail on every k-th query (ids k-1, 2k-1..).")
    mode: FailMode = Field(
        "raise",
        description="raise an exception, exit the process, segfault, or hang until shutdown.",
    )

    @model_validator(mode="after")
    def _has_a_trigger(self) -> FailConfig:
        if self.at_query is None and self.every is None:
            raise ValueError("fail needs `at_query` or `every`")
        return self


class InjectedFailureError(RunFailedError, RuntimeError):
    """Raised by the `fail` stage in `raise` mode."""


class FailStage(Stage[FailConfig]):
    """Fault injection: fails on chosen queries in one of four ways."""

    def _fails(self, query_id: int) -> bool:
        every = self.config.every
        return query_id == self.config.at_query or (
            every is not None and query_id % every == every - 1
        )

    def run(self, query: Query) -> Route:
        if not self._fails(query.query_id):
            return None
        mode = self.config.mode
        if mode == "raise":
            # One text for every failure, so the errors table keeps it once with a count.
            raise InjectedFailureError("injected failure")
        if mode == "exit":
            os._exit(3)
        if mode == "segfault":
            ctypes.string_at(0)  # reads address 0: a real SIGSEGV, as a crashing extension would
        self.context.stop_event.wait()  # hang: released only by shutdown
        return None


class RouteConfig(StageConfig):
    mode: Literal["all", "round_robin", "loop"] = Field(
        "all",
        description="all: fork to every output; round_robin: one output by query id; "
        "loop: back to `back_to` until the query has passed `times` times, then on.",
    )
    back_to: str | None = Field(
        None, description="loop: the earlier stage to send queries back to."
    )
    times: int = Field(2, ge=1, description="loop: passes through this stage before going on.")

    @model_validator(mode="after")
    def _loop_needs_target(self) -> RouteConfig:
        if self.mode == "loop" and not self.back_to:
            raise ValueError("route mode 'loop' needs `back_to`")
        return self


class RouteStage(Stage[RouteConfig]):
    """Routing decisions without work: forks, round-robin branches and bounded loops."""

    @classmethod
    def check_outputs(cls, config: RouteConfig, outputs: Sequence[str]) -> list[str]:
        if config.mode == "loop" and config.back_to not in outputs:
            return [f"route loop target '{config.back_to}' must be listed in outputs"]
        if config.mode == "round_robin" and not outputs:
            return ["route round_robin needs at least one output"]
        return []

    def prepare(self) -> None:
        outputs = self.context.outputs
        self._forward = [name for name in outputs if name != self.config.back_to]
        self._back = [self.config.back_to] if self.config.back_to else []

    def run(self, query: Query) -> Route:
        mode = self.config.mode
        if mode == "all":
            return None
        outputs = self.context.outputs
        if mode == "round_robin":
            return (outputs[query.query_id % len(outputs)],)
        if query.visits[self.context.stage_index] < self.config.times:
            return self._back
        return self._forward

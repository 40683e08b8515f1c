"""Scenarios: how a pipeline's queries are issued and when its load window ends.

Open loop (server, constant, trace) issues on a precomputed schedule whatever the pipeline
does, and records a query the entry queue cannot take as `dropped` (or issues it late,
`on_full: backlog`), so overload shows instead of hiding (no coordinated omission). Closed
loop (closed_loop, single_stream, multi_stream) keeps N queries outstanding. Offline issues
everything at once, after its warm-up has ended. Latency always counts from `scheduled_ns`.

Every arrival due inside the window gets a row: when issuing stops early (timeout, pipeline
stop), the arrivals already due are recorded `not_issued`. This module holds what every
scenario shares; each discipline has its own module, registered in `kinds`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from stages.runtime.pipeline import PipelineRuntime
from stages.runtime.recorder import RowBuffer
from stages.spec.loadgen import LoadgenBase

SpecT = TypeVar("SpecT", bound=LoadgenBase)


@dataclass
class LoadOutcome:
    """What the load generator did and why it stopped."""

    issued: int
    dropped: int
    stopped_by: str  # duration | max_queries | timeout | schedule_end | all_issued | pipeline
    start_ns: int
    last_issue_ns: int
    not_issued: int = 0
    """Arrivals due inside the window when issuing stopped early, recorded `not_issued`."""


EARLY_STOPS = ("timeout", "pipeline")
"""Reasons that stop issuing before the window's end: the arrivals already due are recorded."""


class EndConditions:
    """MLPerf's rule: stop when both the duration and the minimum query count are met, or at
    `max_queries`, or at `timeout_s`. Warm-up precedes the measured window and counts only
    toward `max_queries`: the duration runs from the first measured query, and `min_queries`
    counts measured queries."""

    def __init__(self, spec: LoadgenBase) -> None:
        self.max_queries = spec.max_queries
        self.min_queries = spec.min_queries
        self.duration_ns = int(spec.duration_s * 1e9)
        self.timeout_ns = int(spec.timeout_s * 1e9)
        self.warmup_queries = spec.warmup_queries
        self.warmup_ns = int(spec.warmup_s * 1e9)
        self.measured_start_ns: int | None = None
        """Offset of the first measured (non-warm-up) query; the measured duration starts
        there. None until one is issued."""

    def is_warmup(self, query_index: int, offset_ns: int) -> bool:
        """Whether the query is warm-up; call it once per issued query, in order (the first
        measured one opens the measured window)."""
        warmup = query_index < self.warmup_queries or offset_ns < self.warmup_ns
        if not warmup and self.measured_start_ns is None:
            self.measured_start_ns = offset_ns
        return warmup

    def reached(self, offset_ns: int, issued: int, measured: int) -> str | None:
        """Reason to stop before issuing a query due at `offset_ns`, or None."""
        if self.max_queries is not None and issued >= self.max_queries:
            return "max_queries"
        # Before the first measured query the window would open at this one.
        start_ns = self.measured_start_ns if self.measured_start_ns is not None else offset_ns
        if offset_ns >= start_ns + self.duration_ns and measured >= self.min_queries:
            return "duration"
        if offset_ns >= self.timeout_ns:
            return "timeout"
        return None


class Scenario(ABC, Generic[SpecT]):
    """One extension point per issuing discipline, typed by the loadgen config it drives."""

    def __init__(self, spec: SpecT, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self.end = EndConditions(spec)

    def prepare(self, runtime: PipelineRuntime) -> None:
        """Work done before the start barrier (building query records for offline)."""

    @abstractmethod
    def drive(self, runtime: PipelineRuntime, start_ns: int, buffer: RowBuffer) -> LoadOutcome:
        """Issue queries from `start_ns` until an end condition; runs in the issuing thread."""

    def record_not_issued(
        self,
        runtime: PipelineRuntime,
        buffer: RowBuffer,
        due: Iterable[tuple[int, int, int]],
        start_ns: int,
        stop_ns: int,
        issued: int,
        measured: int,
    ) -> int:
        """Record as `not_issued` the arrivals `(query_id, scheduled_ns, samples)` (in time
        order) that were due by `stop_ns` and inside the window the end conditions would have
        given, as if each had been issued. Returns how many."""
        end = self.end
        recorded = 0
        for query_id, scheduled_ns, samples in due:
            offset_ns = scheduled_ns - start_ns
            if scheduled_ns > stop_ns or end.reached(offset_ns, issued, measured) is not None:
                break
            warmup = end.is_warmup(query_id, offset_ns)
            runtime.record_not_issued(query_id, scheduled_ns, samples, warmup, buffer)
            recorded += 1
            issued += 1
            measured += not warmup
        buffer.flush()
        return recorded

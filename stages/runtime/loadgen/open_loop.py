"""Open loop (server, constant, trace): issue on the arrival process's schedule whatever the
pipeline does, so overload shows as `dropped` queries instead of hiding."""

from __future__ import annotations

import itertools
import random
import time
from typing import Any

from stages.runtime.loadgen.arrivals import NO_PAYLOADS, ArrivalProcess
from stages.runtime.loadgen.idle_gc import IdleCollector
from stages.runtime.loadgen.scenarios import EARLY_STOPS, LoadOutcome, Scenario
from stages.runtime.loadgen.timing import ArrivalClock
from stages.runtime.os_threads import short_wakeup_slice
from stages.runtime.pipeline import PipelineRuntime
from stages.runtime.recorder import RowBuffer
from stages.spec.loadgen import LoadgenBase


class OpenLoopScenario(Scenario[LoadgenBase]):
    """server (Poisson or gamma), constant and trace: issue on schedule, never wait for the
    pipeline; a full entry queue means `dropped` (or a late issue under `on_full: backlog`)."""

    def __init__(self, spec: LoadgenBase, seed: int, arrivals: ArrivalProcess[Any]) -> None:
        super().__init__(spec, seed)
        self.arrivals = arrivals

    def drive(self, runtime: PipelineRuntime, start_ns: int, buffer: RowBuffer) -> LoadOutcome:
        # Garbage is collected only where no query is in flight (idle_gc); woken for an
        # issue, this thread preempts the ones that record and report (os_threads).
        with short_wakeup_slice(), IdleCollector() as collector:
            return self._drive(runtime, start_ns, buffer, collector)

    def _drive(
        self,
        runtime: PipelineRuntime,
        start_ns: int,
        buffer: RowBuffer,
        collector: IdleCollector,
    ) -> LoadOutcome:
        arrivals = self.arrivals
        clock = ArrivalClock()
        block = self.spec.on_full == "backlog"
        end = self.end
        issued = measured = dropped = not_issued = 0
        last_issue_ns = start_ns
        stopped_by = "schedule_end"
        stop_issuing = runtime.stop_issuing
        wait_idle = runtime.wait_idle
        # Announced to the recorder's writer, which keeps its GIL-holding slices clear of it.
        issue_schedule = runtime.recorder.issue_schedule
        deadline_ns = start_ns + end.timeout_ns
        numbered = enumerate(arrivals.schedule(random.Random(self.seed)))
        payloads = arrivals.payloads() or NO_PAYLOADS  # a trace's request shapes, by index
        for index, (offset_ns, samples) in numbered:
            reason = end.reached(offset_ns, issued, measured)
            if reason is None and time.monotonic_ns() >= deadline_ns:
                reason = "timeout"  # the pipeline fell so far behind that real time ran out
            if reason is None and stop_issuing.is_set():
                reason = "pipeline"
            if reason is None:
                scheduled_ns = start_ns + offset_ns
                warmup = end.is_warmup(index, offset_ns)
                query = runtime.new_query(index, scheduled_ns, samples, warmup, payloads[index])
                issue_schedule.next_issue_ns = scheduled_ns
                collector.before_sleep(scheduled_ns, wait_idle)
                clock.sleep_until(scheduled_ns)
                if runtime.issue(query, block, deadline_ns):
                    last_issue_ns = query.issued_ns
                elif block:  # no room before the timeout, or the pipeline stopped meanwhile
                    reason = "pipeline" if stop_issuing.is_set() else "timeout"
                else:
                    dropped += 1
                    runtime.record_dropped(query, buffer, time.monotonic_ns())
            if reason is not None:
                stopped_by = reason
                if reason in EARLY_STOPS:
                    rest = itertools.chain([(index, (offset_ns, samples))], numbered)
                    not_issued = self.record_not_issued(
                        runtime,
                        buffer,
                        ((i, start_ns + offset, size) for i, (offset, size) in rest),
                        start_ns,
                        time.monotonic_ns(),
                        issued,
                        measured,
                    )
                break
            issued += 1
            measured += not warmup
            if len(buffer.query_rows) >= 4096 or last_issue_ns >= buffer.next_flush_ns:
                buffer.flush()
        return LoadOutcome(issued, dropped, stopped_by, start_ns, last_issue_ns, not_issued)

"""Offline: every sample handed over at once, after the warm-up has ended (MLPerf Offline)."""

from __future__ import annotations

import itertools
import threading
import time

from stages.runtime.loadgen.scenarios import LoadOutcome, Scenario
from stages.runtime.loadgen.timing import ArrivalClock
from stages.runtime.pipeline import PipelineRuntime
from stages.runtime.query import Query
from stages.runtime.recorder import RowBuffer
from stages.spec.loadgen import OfflineLoadgen


class OfflineScenario(Scenario[OfflineLoadgen]):
    """offline: `total_samples` (YAML `samples_per_query`) one-sample queries (at most
    `max_queries`), handed over at once, as MLPerf Offline does; throughput is the figure. The
    warm-up queries go first, at the start, and the measured ones only once every warm-up query
    has ended: issued together, they would be served behind the warm-up and the window would
    count its time."""

    def prepare(self, runtime: PipelineRuntime) -> None:
        total = self.spec.total_samples
        if self.spec.max_queries is not None:
            total = min(total, self.spec.max_queries)
        self._queries: list[Query] = [
            runtime.new_query(index, 0, 1, self.end.is_warmup(index, 0)) for index in range(total)
        ]
        runtime.register_offline(self._queries)

    def drive(self, runtime: PipelineRuntime, start_ns: int, buffer: RowBuffer) -> LoadOutcome:
        queries, self._queries = self._queries, []
        warmup = [query for query in queries if query.warmup]
        measured = [query for query in queries if not query.warmup]
        ArrivalClock().sleep_until(start_ns)
        if warmup:
            ended = self._issue_warmup(runtime, warmup, start_ns)
            if not ended:
                # Timed out or the pipeline stopped: the measured queries are never issued.
                stop_ns = time.monotonic_ns()
                runtime.unregister_offline(measured)
                for query in measured:
                    runtime.record_not_issued(
                        query.query_id, stop_ns, query.samples, query.warmup, buffer
                    )
                buffer.flush()
                stopped_by = "pipeline" if runtime.stop_issuing.is_set() else "timeout"
                last_issue_ns = warmup[-1].issued_ns
                return LoadOutcome(
                    len(warmup), 0, stopped_by, start_ns, last_issue_ns, len(measured)
                )
        # The measured window opens now: the measured queries are scheduled as they are issued.
        runtime.issue_offline(measured, time.monotonic_ns())
        last_issue_ns = queries[-1].issued_ns if queries else start_ns
        return LoadOutcome(len(queries), 0, "all_issued", start_ns, last_issue_ns)

    def _issue_warmup(self, runtime: PipelineRuntime, warmup: list[Query], start_ns: int) -> bool:
        """Issue the warm-up queries at `start_ns` and wait until every one has ended; False if
        `timeout_s` ran out or the pipeline stopped taking load first."""
        ended = threading.Event()
        ended_count = itertools.count(1)  # next() is atomic: exit stages may finish at once
        total = len(warmup)

        def on_complete(root: Query) -> None:
            if runtime.stop_issuing.is_set() or (root.warmup and next(ended_count) >= total):
                ended.set()

        runtime.on_complete = on_complete
        try:
            runtime.issue_offline(warmup, start_ns)
            ended.wait(max(0.0, (start_ns + self.end.timeout_ns - time.monotonic_ns()) / 1e9))
        finally:
            runtime.on_complete = None
        return ended.is_set() and not runtime.stop_issuing.is_set()

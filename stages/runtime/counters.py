"""Query counters, spelled once: the runtime's per-thread tallies, the live snapshot the worker
sends, the launcher's outcome, the manifest, MLflow and the report all use these names."""

from __future__ import annotations

from dataclasses import dataclass, field

# The per-status query counts, in the order reports show them; `errors` and `timeouts` are also
# the manifest's and the warehouse's spelling (analysis/sql/views/16_pipeline_outcomes.sql).
QUERY_COUNTS = ("ok", "errors", "dropped", "timeouts")


class Tally:
    """Counts kept by one thread (no locks on the hot path); `PipelineCounters` sums them."""

    __slots__ = ("dropped", "errors", "last_completed_ns", "ok", "samples_ok", "timeouts")

    def __init__(self) -> None:
        self.ok = self.errors = self.dropped = self.timeouts = self.samples_ok = 0
        self.last_completed_ns = 0


@dataclass
class PipelineCounters:
    """A snapshot of live totals (progress displays, phase results)."""

    issued: int = 0
    ok: int = 0
    errors: int = 0
    dropped: int = 0
    timeouts: int = 0
    samples_ok: int = 0
    first_issue_ns: int = 0
    last_completed_ns: int = 0
    measured: int = 0
    """Non-warm-up queries recorded so far, failures included (the SLO verdict's N)."""
    measured_over_slo: int = 0
    """Of those, the ones over the pipeline's `slo_ms` or not ok (the verdict's T)."""
    inflight: int = 0
    """Issued queries not yet finished (live: the in-flight table's size at the snapshot)."""
    recent_latency_ns: list[int] = field(default_factory=list)

    def p99_ms(self) -> float | None:
        latencies = sorted(self.recent_latency_ns)
        if not latencies:
            return None
        return latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] / 1e6

    def add(self, tally: Tally) -> None:
        """Adds one thread's tally to this snapshot."""
        self.ok += tally.ok
        self.errors += tally.errors
        self.dropped += tally.dropped
        self.timeouts += tally.timeouts
        self.samples_ok += tally.samples_ok
        self.last_completed_ns = max(self.last_completed_ns, tally.last_completed_ns)

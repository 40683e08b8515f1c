"""The runtime's side of the query counters: the tally each thread keeps without locks, and the
snapshot summed from them (`stages.contracts.counters.QueryCounters`, the one spelling the
worker, the launcher, the manifest, MLflow and the report share)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from stages.contracts.counters import QueryCounters


class Tally:
    """Counts kept by one thread (no locks on the hot path); `snapshot` sums them."""

    __slots__ = ("dropped", "errors", "last_completed_ns", "ok", "samples_ok", "timeouts")

    def __init__(self) -> None:
        self.ok = self.errors = self.dropped = self.timeouts = self.samples_ok = 0
        self.last_completed_ns = 0


def p99_ms(latencies_ns: np.ndarray) -> float | None:
    """The 99th percentile of `latencies_ns` in milliseconds, nearest rank below (None
    without any): a partial sort, no full one."""
    count = len(latencies_ns)
    if not count:
        return None
    rank = min(count - 1, int(0.99 * count))
    return float(np.partition(latencies_ns, rank)[rank]) / 1e6


def snapshot(
    tallies: Iterable[Tally],
    *,
    issued: int,
    first_issue_ns: int,
    measured: int,
    measured_over_slo: int,
    inflight: int,
    live_p99_ms: float | None,
) -> QueryCounters:
    """The pipeline's counters now: the threads' tallies summed, with what admission and the
    recorder count themselves (`measured`, `measured_over_slo`: the SLO verdict's N and T)."""
    ok = errors = dropped = timeouts = samples_ok = last_completed_ns = 0
    for tally in tallies:
        ok += tally.ok
        errors += tally.errors
        dropped += tally.dropped
        timeouts += tally.timeouts
        samples_ok += tally.samples_ok
        last_completed_ns = max(last_completed_ns, tally.last_completed_ns)
    return QueryCounters(
        issued=issued,
        ok=ok,
        errors=errors,
        dropped=dropped,
        timeouts=timeouts,
        samples_ok=samples_ok,
        first_issue_ns=first_issue_ns,
        last_completed_ns=last_completed_ns,
        measured=measured,
        measured_over_slo=measured_over_slo,
        inflight=inflight,
        live_p99_ms=live_p99_ms,
    )

"""Precise sleeping for the issuing thread without busy-spinning in Python.

Two things make a sleeping issuer late: the kernel's timer slack (50 us by default; we set it
to 1 ns with prctl) and the wake-up latency of the machine (~30-40 us on these VMs, measured
the same from C). `ArrivalClock` learns that latency online and sleeps until shortly before each
arrival, by a margin equal to the 90th percentile of recent wake-up latencies (at most
`SPIN_LIMIT_NS`). About nine wake-ups in ten are then a little early; a query is never issued
early, so an early wake waits out its residue (a few microseconds, at most `SPIN_LIMIT_NS`) in a
short loop, which sleeping again could not do (it would overshoot by a whole wake-up latency).
The cost is about 10 us of one core per wake-up (2% of a core at 2,000 queries/s), instead of
tens of microseconds of lateness for a query.

Why not the median: half the wake-ups were then late, and the queries due while a late one
was issued were late too, so more than half of all queries were; the issue delay's p50 sat on
the edge between the early ones (~3 us) and the late ones (tens of us) and jumped between 5
and 15 us with the machine's load, the kernel hints or the spec's telemetry
(perf/studies/default_spec_issue_delay.py). The real issue time is always recorded.
"""

from __future__ import annotations

import time

from stages.runtime.os_threads import c_library

PR_SET_TIMERSLACK = 29
PR_GET_TIMERSLACK = 30
_WINDOW = 256
_RECALIBRATE_EVERY = 64
_MARGIN_QUANTILE = 0.9  # of recent wake-up latencies: most wake-ups early, p50 off the edge
SPIN_LIMIT_NS = 50_000  # an early wake further from its target than this sleeps again
# The sleep margin never exceeds the wait-out limit, so the wait after a wake-up is bounded by
# SPIN_LIMIT_NS whatever latency the clock learns (the project's rule: at most 50 us).
_MAX_MARGIN_NS = SPIN_LIMIT_NS


def set_timer_slack_ns(slack_ns: int = 1) -> bool:
    """Set the calling thread's timer slack (Linux); False where unsupported."""
    libc = c_library()
    if libc is None:
        return False
    try:
        return int(libc.prctl(PR_SET_TIMERSLACK, slack_ns, 0, 0, 0)) == 0
    except AttributeError:
        return False


def timer_slack_ns() -> int | None:
    """The calling thread's timer slack as the kernel reports it (Linux), else None."""
    libc = c_library()
    if libc is None:
        return None
    try:
        return int(libc.prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0))
    except AttributeError:
        return None


class ArrivalClock:
    """Sleeps until just before a target time, learning the machine's wake-up latency."""

    __slots__ = ("_count", "_lateness", "margin_ns")

    def __init__(self) -> None:
        self.margin_ns = 0
        self._lateness: list[int] = []
        self._count = 0

    def sleep_until(self, target_ns: int) -> int:
        """Return the time of waking (monotonic ns): never before `target_ns`, rarely much
        after it."""
        now_ns = time.monotonic_ns()
        while target_ns - now_ns > SPIN_LIMIT_NS:
            wake_ns = target_ns - self.margin_ns
            if wake_ns <= now_ns:
                break
            time.sleep((wake_ns - now_ns) / 1e9)
            now_ns = time.monotonic_ns()
            self._learn(now_ns - wake_ns)
        while now_ns < target_ns:  # the residue of an early wake: <= SPIN_LIMIT_NS
            now_ns = time.monotonic_ns()
        return now_ns

    def _learn(self, lateness_ns: int) -> None:
        lateness = self._lateness
        if len(lateness) < _WINDOW:
            lateness.append(lateness_ns)
        else:
            lateness[self._count % _WINDOW] = lateness_ns
        self._count += 1
        if self._count % _RECALIBRATE_EVERY == 0 or self._count == 16:
            ordered = sorted(lateness)
            self.margin_ns = min(
                _MAX_MARGIN_NS, max(0, ordered[int(len(ordered) * _MARGIN_QUANTILE)])
            )

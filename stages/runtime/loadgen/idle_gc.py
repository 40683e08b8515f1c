"""Garbage collection moved to idle moments of an open-loop load window.

CPython's automatic collection runs in whichever thread allocates past the threshold; in an
open-loop window that is mostly the issuing thread, about seven times a second at 2,000 q/s,
and a young-generation pass costs ~0.2 ms (p99 0.6 ms): every query due meanwhile is issued
late. `IdleCollector` turns automatic collection off for the window. When garbage is pending,
the issuing thread waits before its next sleep until no query is in flight and collects the
young generation itself, if the pass fits before the next issue, so no query waits on it. A
bound on uncollected objects forces a pass wherever the issuer is, so memory cannot grow
without limit when the load leaves no idle gap; automatic collection, the old generation
included, resumes when the window ends.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

PASS_BUDGET_NS = 1_000_000
"""Time a pass must leave before the next issue (a young pass: ~0.2 ms, p99 ~0.6 ms)."""
FORCE_PENDING = 50_000
"""Uncollected young objects (gc.get_count()[0]) that force a pass, idle or not."""
MIN_PENDING = 700
"""Fewer pending objects than this (CPython's own gen0 threshold) are not worth a pass."""
OLDER_EVERY = 10
"""Every this many passes includes the middle generation (CPython's own ratio)."""


class IdleCollector:
    """Automatic garbage collection off inside `with`; `before_sleep` collects at idle points.

    Used only by the open-loop issuer: closed loop keeps queries in flight all the time, so it
    has no idle point, and keeps CPython's automatic collection."""

    __slots__ = ("_was_enabled", "forced", "passes")

    def __init__(self) -> None:
        self._was_enabled = False
        self.passes = 0
        """Collections this collector ran (forced ones included)."""
        self.forced = 0
        """Of those, the ones the FORCE_PENDING bound ran while queries may have been in flight."""

    def __enter__(self) -> IdleCollector:
        self._was_enabled = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._was_enabled:
            gc.enable()

    def before_sleep(self, next_issue_ns: int, wait_idle: Callable[[float], bool]) -> None:
        """Called by the issuer before it sleeps until `next_issue_ns`: when enough garbage is
        pending, wait (`wait_idle(timeout_s)`, True once nothing is in flight) until no query
        is in flight, at the latest PASS_BUDGET_NS before the next issue, and collect then;
        past the pending bound, collect at once. Only the issuer issues, so nothing enters
        the pipeline during the pass."""
        pending = gc.get_count()[0]
        if pending >= FORCE_PENDING:
            self.forced += 1
        elif pending < MIN_PENDING:
            return
        else:
            latest_ns = next_issue_ns - PASS_BUDGET_NS
            wait_ns = latest_ns - time.monotonic_ns()
            if wait_ns <= 0 or not wait_idle(wait_ns / 1e9):
                return
            if time.monotonic_ns() > latest_ns:
                return  # idle only at the last moment: the pass could delay the next issue
        self.passes += 1
        gc.collect(1 if self.passes % OLDER_EVERY == 0 else 0)

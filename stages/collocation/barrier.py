"""The barrier: every prepared worker starts its load at one common instant chosen by the
launcher, so the load windows of collocated pipelines overlap from their first query."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping

from stages.collocation import protocol
from stages.collocation.protocol import Start
from stages.collocation.supervision import WorkerHandle

START_MARGIN_S = 0.05  # between "all ready" and the common start: time to deliver the message
STOP_GRACE_S = 15.0  # past the pipeline's timeout_s before the launcher intervenes


def start_together(ready: list[WorkerHandle], timeouts_s: Mapping[str, float]) -> int:
    """Send every worker in `ready` the common start instant (returned, monotonic ns) and set
    its deadline: its pipeline's `timeout_s` (from `timeouts_s`, by name) plus STOP_GRACE_S."""
    start_ns = time.monotonic_ns() + int(START_MARGIN_S * 1e9)
    for worker in ready:
        worker.deadline_ns = start_ns + int((timeouts_s[worker.name] + STOP_GRACE_S) * 1e9)
        # A worker that died just now raises here; its sentinel tells the supervisor.
        with contextlib.suppress(OSError):
            protocol.send(worker.connection, Start(start_ns))
    return start_ns

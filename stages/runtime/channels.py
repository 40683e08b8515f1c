"""Bounded channels between stage threads, and the three input policies of a stage's inbox.

Channels are built on `queue.SimpleQueue` (C-implemented, the cheapest thread hand-off CPython
has) with a bound enforced beside it: a producer that finds the channel full waits on a
condition that the consumer signals only when someone is waiting, so the common, unblocked
hand-off costs one `put` and one `get`. Nothing here sleep-polls.
"""

from __future__ import annotations

import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol

from stages.runtime.query import Query

STOP = object()
"""Sentinel that tells a stage thread to finish."""

Empty = queue.Empty


class Outlet(Protocol):
    """What a stage's output sends into: a `Channel` to the next stage's thread, or a fused
    stage's hand-off within one thread (`stages.runtime.fusion.FusedHandOff`)."""

    capacity: int
    """Items it holds before `full` (a fused hand-off never fills)."""

    def qsize(self) -> int:
        """Items held now; with `capacity`, the stage loop's room check (a C call on a
        `Channel`)."""
        ...

    def raw_put(self, item: Any) -> None:
        """Append ignoring the bound, as `put_unbounded` (a C call on a `Channel`)."""
        ...

    def full(self) -> bool: ...

    def put(self, item: Any, timeout: float | None = None) -> bool: ...

    def put_unbounded(self, item: Any) -> None: ...


class Channel:
    """A bounded FIFO between threads: `put` blocks (or refuses) when full, `get` when empty."""

    __slots__ = (
        "_items",
        "_not_full",
        "capacity",
        "qsize",
        "raw_get",
        "raw_put",
        "waiting_producers",
    )

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._not_full = threading.Condition(threading.Lock())
        self.waiting_producers = 0
        """Producers blocked in `put`/`wait_for_room` on a full channel (read-only outside)."""
        self.raw_get = self._items.get
        """The bare `SimpleQueue.get(block, timeout)`: a hot loop that uses it must call
        `wake_producer()` when `waiting_producers` is non-zero, as `get` does. Reading the
        attribute costs less than a method call, once per query."""
        self.raw_put: Callable[[Any], None] = self._items.put
        """The bare `SimpleQueue.put`, ignoring the bound (offline bulk issue, the stage loop
        after its own room check)."""
        self.qsize: Callable[[], int] = self._items.qsize
        """Items queued now (the bare `SimpleQueue.qsize`: no Python frame on the hot path)."""

    def full(self) -> bool:
        return self._items.qsize() >= self.capacity

    def put(self, item: Any, timeout: float | None = None) -> bool:
        """Append, waiting for room (back-pressure); False if `timeout` passed while full."""
        if self._items.qsize() >= self.capacity and not self.wait_for_room(timeout):
            return False
        self._items.put(item)
        return True

    def wait_for_room(self, timeout: float | None = None) -> bool:
        """Wait until the channel has room; False if `timeout` passed while full. Lets a sole
        producer take a timestamp at the moment its item can go in (issue time under
        back-pressure), then append with `put_unbounded`."""
        items = self._items
        if items.qsize() < self.capacity:
            return True
        with self._not_full:
            self.waiting_producers += 1
            try:
                # Re-check under the lock: a consumer that took the last item before we
                # registered saw no waiter and will not notify.
                while items.qsize() >= self.capacity:
                    if not self._not_full.wait(timeout):
                        return False
            finally:
                self.waiting_producers -= 1
        return True

    def put_nowait(self, item: Any) -> bool:
        """Append if there is room; False (nothing appended) when full."""
        if self._items.qsize() >= self.capacity:
            return False
        self._items.put(item)
        return True

    def put_unbounded(self, item: Any) -> None:
        """Append ignoring the bound: control messages (STOP) and offline bulk issue."""
        self._items.put(item)

    def get(self, timeout: float | None = None) -> Any:
        """Take the oldest item; raises `Empty` after `timeout` seconds."""
        item = self._items.get(timeout=timeout)
        if self.waiting_producers:
            self.wake_producer()
        return item

    def wake_producer(self) -> None:
        with self._not_full:
            self._not_full.notify()


class Inbox(ABC):
    """Where a stage thread takes its next query from, under its input policy."""

    @abstractmethod
    def channel_for(self, source_index: int) -> Channel:
        """The channel that upstream stage `source_index` (-1 = load generator) writes to."""

    @abstractmethod
    def get(self, timeout: float) -> Any:
        """Next query (or STOP) for the stage; raises `Empty` after `timeout` seconds."""

    @abstractmethod
    def stop(self) -> None:
        """Deliver STOP behind everything already queued."""


class AnyInbox(Inbox):
    """`any`: one shared FIFO, first come first served across inputs."""

    def __init__(self, capacity: int) -> None:
        self.channel = Channel(capacity)
        self.get = self.channel.get  # type: ignore[method-assign]  # skip a call on the hot path

    def channel_for(self, source_index: int) -> Channel:
        return self.channel

    def get(self, timeout: float) -> Any:
        return self.channel.get(timeout)

    def stop(self) -> None:
        self.channel.put_unbounded(STOP)


class _DoorbellChannel(Channel):
    """A per-input channel that rings a shared doorbell once per item it accepts."""

    __slots__ = ("_doorbell",)

    def __init__(self, capacity: int, doorbell: queue.SimpleQueue[None]) -> None:
        super().__init__(capacity)
        self._doorbell = doorbell
        self.raw_put = self.put_unbounded  # every item must ring the doorbell

    def put(self, item: Any, timeout: float | None = None) -> bool:
        if super().put(item, timeout):
            self._doorbell.put(None)
            return True
        return False

    def put_nowait(self, item: Any) -> bool:
        if super().put_nowait(item):
            self._doorbell.put(None)
            return True
        return False

    def put_unbounded(self, item: Any) -> None:
        super().put_unbounded(item)
        self._doorbell.put(None)

    def get_if_any(self) -> tuple[bool, Any]:
        try:
            return True, self.get(timeout=0)
        except Empty:
            return False, None


class PriorityInbox(Inbox):
    """`priority`: one channel per input; the most urgent non-empty one is served first.

    Each accepted item rings a doorbell; the consumer blocks on the doorbell, so it wakes once
    per item and always finds at least one waiting (only it consumes these channels).
    """

    def __init__(self, capacity: int, inputs_by_urgency: list[int]) -> None:
        self._doorbell: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._order = [_DoorbellChannel(capacity, self._doorbell) for _ in inputs_by_urgency]
        self._by_source = dict(zip(inputs_by_urgency, self._order, strict=True))
        self._control = _DoorbellChannel(1, self._doorbell)

    def channel_for(self, source_index: int) -> Channel:
        return self._by_source[source_index]

    def get(self, timeout: float) -> Any:
        self._doorbell.get(timeout=timeout)
        for channel in self._order:
            found, item = channel.get_if_any()
            if found:
                return item
        return self._control.get(timeout=0)  # only STOP travels here, behind all queries

    def stop(self) -> None:
        self._control.put_unbounded(STOP)


class JoinInbox(AnyInbox):
    """`join`: inputs share a FIFO; the stage thread merges branches by query id (see
    `JoinBuffer`), so a join never mixes two queries and never polls."""


class JoinBuffer:
    """Pending branches of queries at a join, keyed by query id; merges when all inputs gave one.

    The merged record's payload is a dict {input stage id: that branch's payload}.
    """

    __slots__ = ("_input_names", "pending", "sources")

    def __init__(self, input_indices: list[int], input_names: dict[int, str]) -> None:
        self.sources = frozenset(input_indices)
        self._input_names = input_names
        self.pending: dict[int, dict[int, Query]] = {}
        """query id -> {input stage index: the branch that arrived from it}"""

    def offer(self, branch: Query) -> Query | None:
        """Add one arriving branch; returns the merged query once every input delivered."""
        arrived = self.pending.setdefault(branch.query_id, {})
        arrived[branch.source] = branch
        if arrived.keys() != self.sources:
            return None
        del self.pending[branch.query_id]
        merged = branch  # the last to arrive carries on; the others are absorbed
        # Join wait runs from the first branch's arrival: the merged record keeps that time.
        merged.enqueued_ns = min(b.enqueued_ns for b in arrived.values())
        merged.payload = {self._input_names[src]: b.payload for src, b in arrived.items()}
        branch_visits = [b.visits for b in arrived.values()]
        merged.visits = [max(counts) for counts in zip(*branch_visits, strict=True)]
        return merged

"""Open-loop arrival processes: when each query is due, as offsets from the window's start."""

from __future__ import annotations

import functools
import random
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

from stages.runtime.loadgen.trace_formats import TraceRequest, read_trace
from stages.spec.loadgen import ConstantLoadgen, SamplesPerQuery, ServerLoadgen, TraceLoadgen

SpecT = TypeVar("SpecT", bound=SamplesPerQuery)

Arrival = tuple[int, int]
"""(offset_ns from the start of the load window, samples carried by the query)"""


class _NoPayloads:
    """Every arrival's payload is None (what an arrival process without payloads gives)."""

    def __getitem__(self, index: int) -> None:
        return None


NO_PAYLOADS = _NoPayloads()


class ArrivalProcess(ABC, Generic[SpecT]):
    """One extension point per way queries arrive; `schedule` must be a pure function of
    the spec and the seed, so a rerun issues the identical schedule. Registered with its
    loadgen config model in `stages.runtime.loadgen.kinds`."""

    def __init__(self, spec: SpecT) -> None:
        self.spec = spec

    @abstractmethod
    def schedule(self, rng: random.Random) -> Iterator[Arrival]:
        """Arrivals in time order; may be endless (the end conditions stop it)."""

    def payloads(self) -> list[dict[str, Any] | None] | None:
        """Per arrival (by index), the payload its query starts with; None: none at all."""
        return None


class PoissonArrivals(ArrivalProcess[ServerLoadgen]):
    """Server scenario: gamma inter-arrivals with shape `burstiness` (1 = Poisson, exponential
    gaps) and mean 1/rate; the coefficient of variation is 1/sqrt(burstiness)."""

    def schedule(self, rng: random.Random) -> Iterator[Arrival]:
        shape = self.spec.burstiness
        scale_s = 1.0 / (self.spec.rate * shape)
        samples = self.spec.samples_per_query
        offset_s = 0.0
        while True:
            offset_s += rng.gammavariate(shape, scale_s)
            yield int(offset_s * 1e9), samples


class ConstantArrivals(ArrivalProcess[ConstantLoadgen]):
    """A fixed gap of 1/rate between queries, the first at time zero."""

    def schedule(self, rng: random.Random) -> Iterator[Arrival]:
        gap_ns = 1e9 / self.spec.rate
        samples = self.spec.samples_per_query
        index = 0
        while True:
            yield int(index * gap_ns), samples
            index += 1


class TraceArrivals(ArrivalProcess[TraceLoadgen]):
    """Replays a trace file's arrivals (`stages.runtime.loadgen.trace_formats`), each query
    carrying the request shape the trace gives it (input and output tokens, hash_ids)."""

    @functools.cached_property
    def _requests(self) -> list[TraceRequest]:
        """The trace, read when the load starts (the launcher checked it before the run)."""
        return read_trace(Path(self.spec.trace), self.spec)

    def schedule(self, rng: random.Random) -> Iterator[Arrival]:
        return ((request.offset_ns, request.samples) for request in self._requests)

    def payloads(self) -> list[dict[str, Any] | None] | None:
        shapes = [request.shape for request in self._requests]
        return shapes if any(shape is not None for shape in shapes) else None

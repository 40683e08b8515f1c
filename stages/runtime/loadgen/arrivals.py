"""Open-loop arrival processes: when each query is due, as offsets from the window's start."""

from __future__ import annotations

import csv
import random
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Generic, TypeVar

from stages.contracts.errors import InvalidInputError
from stages.spec.loadgen import ConstantLoadgen, SamplesPerQuery, ServerLoadgen, TraceLoadgen

SpecT = TypeVar("SpecT", bound=SamplesPerQuery)

Arrival = tuple[int, int]
"""(offset_ns from the start of the load window, samples carried by the query)"""


class ArrivalProcess(ABC, Generic[SpecT]):
    """One extension point per way queries arrive; `schedule` must be a pure function of
    the spec and the seed, so a rerun issues the identical schedule. Registered with its
    loadgen config model in `stages.runtime.loadgen.kinds`."""

    def __init__(self, spec: SpecT) -> None:
        self.spec = spec

    @abstractmethod
    def schedule(self, rng: random.Random) -> Iterator[Arrival]:
        """Arrivals in time order; may be endless (the end conditions stop it)."""


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
    """Replays arrival offsets (column `offset_ms`, optional `samples`) from CSV or Parquet."""

    def schedule(self, rng: random.Random) -> Iterator[Arrival]:
        yield from read_trace(Path(self.spec.trace), self.spec.samples_per_query)


class TraceError(InvalidInputError, ValueError):
    """A trace file that cannot be replayed."""


def read_trace(path: Path, default_samples: int = 1) -> list[Arrival]:
    """Load and check a trace: offsets must be non-negative and non-decreasing."""
    if not path.exists():
        raise TraceError(f"{path}: trace file not found")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path).to_pydict()
        offsets = table.get("offset_ms")
        sizes = table.get("samples")
    else:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        offsets = [row.get("offset_ms") for row in rows] if rows else None
        sizes = [row.get("samples") for row in rows] if rows and "samples" in rows[0] else None
    if not offsets:
        raise TraceError(f"{path}: needs a non-empty column `offset_ms`")
    arrivals: list[Arrival] = []
    previous_ns = 0
    for row, value in enumerate(offsets):
        try:
            offset_ns = round(float(value) * 1e6)
            samples = int(sizes[row]) if sizes and sizes[row] not in (None, "") else default_samples
        except (TypeError, ValueError):
            raise TraceError(f"{path}: row {row + 1}: not a number") from None
        if offset_ns < previous_ns or offset_ns < 0 or samples < 1:
            raise TraceError(
                f"{path}: row {row + 1}: offsets must be non-decreasing and >= 0, samples >= 1"
            )
        arrivals.append((offset_ns, samples))
        previous_ns = offset_ns
    return arrivals

"""A simulated executor for region tests: two pipelines of fixed service time, each fed by its
own seeded Poisson schedule (unit schedule / rate, so probes share their random numbers), served
either by two independent FIFO servers (the box) or by one shared FIFO server taking the merged
stream (the line x + y = 1), by the Lindley recursion in closed form. `SimulatedSearch` stands in
for search_runner.run_capacity_search: a bracket-and-bisect search on these verdicts that writes
search.json and capacity.json as the real one does, so resuming is exercised too. Verdicts are
the real three-valued ones by counts; undecided counts as not met, as a second undecided does."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stages.contracts.capacity_files import (
    CAPACITY_FILE,
    SEARCH_FILE,
    CapacityResult,
    ProbeRecord,
    SearchSettings,
    Verdict,
)
from stages.contracts.slo_verdict import slo_verdict_by_counts
from stages.validation.loading import LoadedSpec

WINDOW_S = 120.0
"""Each simulated probe's arrival window."""


def unit_schedule(seed: int, pipeline: str, count: int) -> np.ndarray:
    """Arrival times of a rate-1 Poisson stream, fixed by (seed, pipeline)."""
    rng = np.random.default_rng([seed, zlib.crc32(pipeline.encode())])
    return np.cumsum(rng.exponential(1.0, count))


def arrivals_s(seed: int, pipeline: str, rate_qps: float) -> np.ndarray:
    """The pipeline's arrivals within the window at `rate_qps` (the unit schedule scaled)."""
    count = int(rate_qps * WINDOW_S * 1.3) + 200
    times = unit_schedule(seed, pipeline, count) / rate_qps
    return times[times < WINDOW_S]


def fifo_latencies_s(arrivals: np.ndarray, service_s: np.ndarray) -> np.ndarray:
    """Sojourn times of one FIFO server: d_n = max(a_n, d_(n-1)) + S_n, solved as
    d_n - C_n = cummax(a_k - C_(k-1)) with C the running sum of service times."""
    served = np.cumsum(service_s)
    before = served - service_s
    departures = np.maximum.accumulate(arrivals - before) + served
    return departures - arrivals


@dataclass(frozen=True)
class TwoQueueModel:
    """Service time per pipeline; `shared`: one FIFO server for both, else one each."""

    service_ms: dict[str, float]
    shared: bool

    def latencies_ms(self, rates_qps: dict[str, float], seed: int) -> dict[str, np.ndarray]:
        streams = {name: arrivals_s(seed, name, rate) for name, rate in rates_qps.items()}
        if not self.shared:
            return {
                name: 1000 * fifo_latencies_s(times, np.full(times.size, self._service_s(name)))
                for name, times in streams.items()
            }
        names = list(streams)
        merged = np.concatenate([streams[name] for name in names])
        owner = np.concatenate([np.full(streams[name].size, i) for i, name in enumerate(names)])
        order = np.argsort(merged, kind="stable")
        service = np.array([self._service_s(name) for name in names])[owner[order]]
        sojourn = 1000 * fifo_latencies_s(merged[order], service)
        return {name: sojourn[owner[order] == i] for i, name in enumerate(names)}

    def _service_s(self, name: str) -> float:
        return self.service_ms[name] / 1000


def p99_ms(latencies_ms: np.ndarray) -> float:
    return float(np.quantile(latencies_ms, 0.99))


def combined_verdict(verdicts: list[Verdict]) -> Verdict:
    """A ray's probe: met when every pipeline met, missed when any missed, else undecided."""
    if all(verdict == "met" for verdict in verdicts):
        return "met"
    return "missed" if "missed" in verdicts else "undecided"


@dataclass
class SimulatedSearch:
    """run_capacity_search's stand-in: (loaded, settings, options) -> CapacityResult."""

    model: TwoQueueModel
    seed: int = 3
    calls: list[str] = field(default_factory=list)

    def __call__(
        self, loaded: LoadedSpec, settings: SearchSettings, options: object
    ) -> CapacityResult:
        folder: Path = options.out_dir / settings.search_id  # type: ignore[attr-defined]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / SEARCH_FILE).write_text(settings.model_dump_json(by_alias=True))
        self.calls.append(settings.search_id)
        probes: list[ProbeRecord] = []
        lo, hi = bisect(
            lambda rate: self._probe(settings, rate, probes),
            _start(self, settings),
            settings.precision,
            settings.max_probes,
            settings.min_rate or 1e-3,
        )
        result = CapacityResult.model_validate(
            {
                "search_id": settings.search_id,
                "pipeline": settings.pipeline,
                "slo_ms": settings.slo_ms,
                "percentile": settings.percentile,
                "with": settings.with_rates,
                "certified_qps": lo,
                "estimate_qps": math.sqrt(lo * hi) if lo and hi else None,
                "estimate_ci95": (lo, hi) if lo and hi else None,
                "bracket": (lo or 0.0, hi),
                "probes": probes,
                "stop_reason": "converged" if lo else "infeasible",
            }
        )
        (folder / CAPACITY_FILE).write_text(result.model_dump_json(by_alias=True))
        return result

    def _probe(self, settings: SearchSettings, rate: float, probes: list[ProbeRecord]) -> Verdict:
        rates, slos = _rates_and_slos(settings, rate)
        latencies = self.model.latencies_ms(rates, self.seed)
        over = {name: int((latencies[name] > slos[name]).sum()) for name in rates}
        verdicts = [
            slo_verdict_by_counts(latencies[name].size, over[name], settings.percentile)
            for name in rates
        ]
        verdict = combined_verdict(verdicts)
        first = next(iter(rates))
        probes.append(
            ProbeRecord(
                index=len(probes),
                rate=rate,
                seed=self.seed,
                queries=latencies[first].size,
                over_slo=over[first],
                verdict=verdict,
                p99_ms=p99_ms(latencies[first]),
                run_dir=None,
            )
        )
        return verdict


def _rates_and_slos(
    settings: SearchSettings, rate: float
) -> tuple[dict[str, float], dict[str, float]]:
    if settings.ray is None:
        return {settings.pipeline: rate}, {settings.pipeline: settings.slo_ms}
    assert settings.ray_slo_ms is not None
    return {name: rate * unit for name, unit in settings.ray.items()}, dict(settings.ray_slo_ms)


def _start(search: SimulatedSearch, settings: SearchSettings) -> float:
    """Rays start at s = 0.5; a solo search at half the server's ceiling 1 / service time."""
    if settings.ray is not None:
        return 0.5
    return 0.5 * 1000 / search.model.service_ms[settings.pipeline]


def bisect(
    verdict: Callable[[float], Verdict],
    start: float,
    precision: float,
    max_probes: int,
    min_rate: float,
) -> tuple[float | None, float | None]:
    """Bracket by doubling/halving from `start`, then bisect at the geometric midpoint."""
    lo: float | None = None
    hi: float | None = None
    rate, probes = start, 0
    while probes < max_probes and (lo is None or hi is None):
        probes += 1
        if verdict(rate) == "met":
            lo, rate = rate, rate * 2
        else:
            hi, rate = rate, rate / 2
            if rate < min_rate:
                return lo, hi
    while probes < max_probes and lo is not None and hi is not None and hi / lo > 1 + precision:
        probes += 1
        middle = math.sqrt(lo * hi)
        lo, hi = (middle, hi) if verdict(middle) == "met" else (lo, middle)
    return lo, hi


@dataclass
class SimOptions:
    """The part of SearchRunOptions the region reads."""

    out_dir: Path
    progress: Callable[[str], None] | None = None
    messages: list[str] = field(default_factory=list)

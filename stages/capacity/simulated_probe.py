"""A probe executor without a pipeline: one FIFO server with a fixed service time, fed
collobench's own seeded arrival schedule, so the search controller can be checked on a queue
whose answer is known (M/D/1) in seconds.

Waiting times follow the Lindley recursion W(n+1) = max(0, W(n) + D - A(n+1)) (A: the gap
between arrivals n and n+1); a query's latency is W + D. The arrivals come from
stages.runtime.loadgen.arrivals.PoissonArrivals with the rng the runtime seeds for the same
spec seed, pipeline and trial, so probes at different rates share their random numbers: the
schedule at rate r is the one at rate 1 scaled by 1 / r (gammavariate(k, b) = b *
gammavariate(k, 1) draw for draw), so each seed's rate-1 schedule is drawn once and cached.
"""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from stages.capacity.clustering import design_effect, effective_counts
from stages.capacity.controller import ProbeRequest
from stages.contracts.capacity_files import PipelineProbe, ProbeRecord, Verdict
from stages.contracts.slo_verdict import SloRule
from stages.runtime.driver import arrival_seed
from stages.runtime.loadgen.arrivals import PoissonArrivals
from stages.spec.loadgen import ServerLoadgen

BLOCKS = 10
"""Time-ordered blocks of a probe's measured queries kept for the estimate's bootstrap."""


@dataclass(frozen=True)
class SimulatedServer:
    """The simulated pipeline: one server of fixed service time under an open-loop schedule."""

    service_ms: float = 5.0
    slo_ms: float = 50.0
    percentile: float = 0.99
    probe_s: float = 30.0
    warmup_s: float = 0.0
    burstiness: float = 1.0
    pipeline: str = "sleeper"
    trial: int = 0
    early_abort: bool = True


def arrival_offsets_s(server: SimulatedServer, rate: float, seed: int) -> np.ndarray:
    """The arrival offsets (s) the runtime schedules in the window warmup_s + probe_s for spec
    seed `seed` at `rate` (the rng derived as stages.runtime.driver derives it)."""
    spec = ServerLoadgen(type="server", rate=rate, burstiness=server.burstiness)
    rng = random.Random(arrival_seed(seed, server.pipeline, server.trial))
    window_ns = (server.warmup_s + server.probe_s) * 1e9
    offsets = itertools.takewhile(
        lambda arrival: arrival[0] < window_ns, PoissonArrivals(spec).schedule(rng)
    )
    return np.fromiter((offset_ns for offset_ns, _ in offsets), dtype=np.float64) / 1e9


class UnitSchedules:
    """Each seed's arrival schedule at rate 1 (offsets in s), drawn by PoissonArrivals and
    extended on demand; the few most recent seeds are kept."""

    def __init__(self, server: SimulatedServer, keep: int = 4) -> None:
        self.server = server
        self.keep = keep
        self._cache: OrderedDict[int, tuple[Iterator[tuple[int, int]], list[float]]] = OrderedDict()

    def offsets_s(
        self, rate: float, seed: int, window_s: float | None = None, min_queries: int = 0
    ) -> np.ndarray:
        """The offsets (s) of the window warmup_s + window_s (default probe_s) at `rate`,
        extended to hold `min_queries` measured arrivals (LoadGen's rule: both)."""
        window = self.server.probe_s if window_s is None else window_s
        horizon = (self.server.warmup_s + window) * rate  # in rate-1 seconds
        schedule, drawn = self._entry(seed)
        while len(drawn) < min_queries + 1 or drawn[-1] < horizon:
            drawn.extend(offset_ns / 1e9 for offset_ns, _ in itertools.islice(schedule, 4096))
        unit = np.asarray(drawn)
        warmup = int(np.searchsorted(unit, self.server.warmup_s * rate))
        count = max(int(np.searchsorted(unit, horizon)), warmup + min_queries)
        return unit[:count] / rate

    def _entry(self, seed: int) -> tuple[Iterator[tuple[int, int]], list[float]]:
        if seed not in self._cache:
            spec = ServerLoadgen(type="server", rate=1.0, burstiness=self.server.burstiness)
            rng = random.Random(arrival_seed(seed, self.server.pipeline, self.server.trial))
            self._cache[seed] = (PoissonArrivals(spec).schedule(rng), [])
            while len(self._cache) > self.keep:
                self._cache.popitem(last=False)
        self._cache.move_to_end(seed)
        return self._cache[seed]


def lindley_latencies_ms(offsets_s: np.ndarray, service_ms: float) -> np.ndarray:
    """Each query's latency (wait + service) at a FIFO server that starts empty: the Lindley
    recursion in closed form, W(n) = S(n) - min(0, min over k <= n of S(k)), S the partial sums
    of service - gap."""
    if offsets_s.size == 0:
        return offsets_s
    steps_s = service_ms / 1e3 - np.diff(offsets_s)
    walk_s = np.concatenate(([0.0], np.cumsum(steps_s)))
    waits_s = walk_s - np.minimum(np.minimum.accumulate(walk_s), 0.0)
    return (waits_s * 1e3) + service_ms


def time_blocks(over: np.ndarray, blocks: int = BLOCKS) -> list[tuple[int, int]]:
    """(queries, over_slo) of `blocks` successive, near-equal slices of the measured queries."""
    return [(int(part.size), int(part.sum())) for part in np.array_split(over, blocks) if part.size]


class SimulatedProbe:
    """Runs a ProbeRequest against a SimulatedServer and returns the ProbeRecord a real probe
    would write, with the verdict from `rule` and the real executor's early abort (stop once the
    over-SLO count exceeds what the planned number of queries may have and still be met)."""

    def __init__(self, server: SimulatedServer, rule: SloRule) -> None:
        self.server = server
        self.rule = rule
        self.schedules = UnitSchedules(server)

    def __call__(self, request: ProbeRequest) -> ProbeRecord:
        if request.kind == "ceiling":
            return self._ceiling(request)
        if request.kind == "unloaded":
            return self._unloaded(request)
        return self._search(request)

    def _unloaded(self, request: ProbeRequest) -> ProbeRecord:
        """One query at a time: every latency is the service time, for min_queries queries
        (at least probe_s of them)."""
        server = self.server
        per_s = 1e3 / server.service_ms
        longest_s = server.probe_s if request.window_s is None else request.window_s
        queries = min(max(request.min_queries, int(server.probe_s * per_s)), int(longest_s * per_s))
        over = queries if server.service_ms > server.slo_ms else 0
        verdict = self.rule.verdict(queries, over, server.percentile)
        figures = PipelineProbe(
            rate_qps=None,
            queries=queries,
            over_slo=over,
            verdict=verdict,
            p99_ms=server.service_ms,
            throughput_qps=None,
        )
        return ProbeRecord(
            index=0,
            kind="unloaded",
            rate=request.rate,
            seed=request.seed,
            queries=queries,
            over_slo=over,
            verdict=verdict,
            p99_ms=server.service_ms,
            run_dir=None,
            duration_s=queries * server.service_ms / 1e3,
            window_s=request.window_s,
            pipelines={server.pipeline: figures},
        )

    def _ceiling(self, request: ProbeRequest) -> ProbeRecord:
        """Closed loop, one client: the server completes 1000 / service_ms queries per second."""
        server = self.server
        throughput_qps = 1e3 / server.service_ms
        queries = int(server.probe_s * throughput_qps)
        figures = PipelineProbe(
            rate_qps=None,
            queries=queries,
            over_slo=0,
            verdict=None,
            p99_ms=server.service_ms,
            throughput_qps=throughput_qps,
        )
        return ProbeRecord(
            index=0,
            kind="ceiling",
            rate=request.rate,
            seed=request.seed,
            queries=queries,
            over_slo=0,
            verdict=None,
            p99_ms=server.service_ms,
            run_dir=None,
            throughput_qps=throughput_qps,
            duration_s=server.probe_s,
            pipelines={server.pipeline: figures},
        )

    def _abort_at(self, over: np.ndarray, request: ProbeRequest, window_s: float) -> int | None:
        """The index of the measured query at which the probe can no longer pass, if any: past
        the request's allowance, else what its planned size allows."""
        allowed = request.max_over_slo
        if allowed is None:
            planned = int(request.rate * window_s)
            allowed = self.rule.max_passing_over_slo(planned, self.server.percentile)
        if not self.server.early_abort or allowed < 0:
            return None
        crossed = np.flatnonzero(np.cumsum(over) > allowed)
        return int(crossed[0]) if crossed.size else None

    def _search(self, request: ProbeRequest) -> ProbeRecord:
        server = self.server
        window_s = server.probe_s if request.window_s is None else request.window_s
        offsets_s = self.schedules.offsets_s(
            request.rate, request.seed, window_s, request.min_queries
        )
        latencies_ms = lindley_latencies_ms(offsets_s, server.service_ms)
        measured = offsets_s >= server.warmup_s
        latencies_ms, offsets_s = latencies_ms[measured], offsets_s[measured]
        over = latencies_ms > server.slo_ms
        abort_at = self._abort_at(over, request, window_s)
        abort_reason = None
        duration_s = max(window_s, float(offsets_s[-1]) - server.warmup_s if offsets_s.size else 0)
        if abort_at is not None:
            latencies_ms, over = latencies_ms[: abort_at + 1], over[: abort_at + 1]
            duration_s = float(offsets_s[abort_at]) - server.warmup_s
            abort_reason = (
                f"{int(over.sum())} queries over the SLO: more than the rate's last look allows"
                if request.max_over_slo is not None
                else f"{int(over.sum())} queries over the SLO: more than a run of "
                f"{int(request.rate * window_s)} queries may have and be met"
            )
        queries, over_slo = int(over.size), int(over.sum())
        effect = design_effect(over)
        counted = effective_counts(queries, over_slo, effect)
        verdict: Verdict = self.rule.verdict(*counted, server.percentile)
        if abort_reason is not None and verdict != "missed":
            verdict = "undecided"  # cannot pass, though not proven missed
        p99_ms = float(np.percentile(latencies_ms, 99)) if queries else None
        throughput_qps = queries / duration_s if duration_s > 0 else None
        figures = PipelineProbe(
            rate_qps=request.rate,
            queries=queries,
            over_slo=over_slo,
            verdict=verdict,
            p99_ms=p99_ms,
            throughput_qps=throughput_qps,
        )
        return ProbeRecord(
            index=0,
            kind="search",
            rate=request.rate,
            seed=request.seed,
            queries=queries,
            over_slo=over_slo,
            verdict=verdict,
            p99_ms=p99_ms,
            abort_reason=abort_reason,
            cannot_pass=abort_reason is not None and verdict != "missed",
            run_dir=None,
            throughput_qps=throughput_qps,
            duration_s=duration_s,
            window_s=window_s,
            batches=time_blocks(over),
            design_effect=effect,
            pipelines={server.pipeline: figures},
        )


def fifo_capacity_qps(
    service_ms: float,
    slo_ms: float,
    percentile: float = 0.99,
    seeds: int = 16,
    customers: int = 300_000,
    rng_seed: int = 20261124,
) -> float:
    """The true capacity of the simulated server: the Poisson rate at which, in the long run,
    1 - percentile of queries exceed `slo_ms`, by bisection on the rate over `seeds` runs of
    `customers` arrivals (the same draws at every rate, so the share is monotone in it)."""
    gaps = np.random.default_rng(rng_seed).exponential(size=(seeds, customers - 1))
    service_s, slo_s = service_ms / 1e3, slo_ms / 1e3

    def over_share(rate: float) -> float:
        walk = np.cumsum(service_s - gaps / rate, axis=1)
        waits = walk - np.minimum(np.minimum.accumulate(walk, axis=1), 0.0)
        return float(np.mean(waits + service_s > slo_s))

    low, high = 0.0, 1e3 / service_ms
    while high - low > 1e-4 * high:
        middle = (low + high) / 2
        low, high = (low, middle) if over_share(middle) > 1 - percentile else (middle, high)
    return (low + high) / 2

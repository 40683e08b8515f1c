"""The capacity estimate: where an isotonic (PAVA) fit of the over-SLO share against log rate
crosses 1 - percentile, with a 95% bootstrap interval.

Numpy only. Near capacity over-SLO queries come in bursts, so a probe's over-SLO count varies far
more than a binomial's. When the probes carry their design effect d (stages.capacity.clustering)
the interval redraws each count log-normally with median T and variance ~ T * d; otherwise it
resamples each probe's ten time-ordered blocks (ProbeRecord.batches). Probes run with the same
seed share their arrivals (common random numbers), so they share their draws: one shock, or one
set of block indices, per seed and replicate. The share grows about exponentially with the rate,
so the crossing interpolates the log of the fitted share in log rate.

Short windows hold few bursts, and a probe stopped early cuts its last one, so their d is too
small and one window's count usually lies below its mean (a few bursts, heavy-tailed): the
interval used to exclude the truth (coverage 0.71 with 15 s probes on the simulated M/D/1).
Three corrections, each measured (perf/capacity_coverage.py): d from the bursts the probes saw
whole (`censored_design_effect`), counts redrawn about their median rather than their mean, and
the percentile interval widened by Student's t with as many degrees of freedom as bursts behind
the crossing (`burst_degrees_of_freedom`); an end beyond the probed rates is the probed rate's.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from stages.contracts.capacity_files import ProbeRecord

BOOTSTRAP_REPLICATES = 400
BOOTSTRAP_SEED = 20_261_124
ESTIMATE_METHOD = (
    "PAVA isotonic fit of over_slo/queries on log rate (weighted by queries, probes at one rate "
    "pooled); the crossing of 1 - percentile interpolates log(fitted share) linearly in log rate "
    "between adjacent fitted blocks. 95% interval: percentile bootstrap, {replicates} replicates; "
    "each over_slo redrawn log-normal with median T and variance ~ T * d (d: the design effect of "
    "the bursts the probes saw whole, a probe stopped early counting its last burst as cut), one "
    "shock per seed and replicate; probes without a design effect: their ten time-ordered blocks "
    "resampled (shared indices per seed); the ends widened about the estimate by "
    "t(0.975, nu) / z(0.975), nu the bursts in the probes at the two rates beside the estimate; "
    "an end beyond the probed rates clipped to them"
)
OVERLOADED_SHARE_FACTOR = 5.0
"""Probes over this many times the target share are overloaded (one burst that never ends):
their bursts say nothing about the burst sizes near the crossing."""
_Z_975 = 1.959963984540054


@dataclass(frozen=True)
class CapacityEstimate:
    """The point estimate (None: the fit does not straddle the target share) and its interval."""

    estimate_qps: float | None
    ci95: tuple[float, float] | None
    method: str


@dataclass(frozen=True)
class _Observations:
    """The probes' data as arrays: log rate, queries and over-SLO counts per probe."""

    log_rate: np.ndarray
    queries: np.ndarray
    over_slo: np.ndarray


def isotonic_blocks(
    log_rate: np.ndarray, share: np.ndarray, weight: np.ndarray
) -> list[tuple[float, float, float]]:
    """Pool-adjacent-violators: the non-decreasing weighted least-squares fit of `share`
    against `log_rate` (points sorted by it, distinct). Returns its blocks in order as
    (weighted mean log rate, fitted share, total weight)."""
    blocks: list[list[float]] = []  # [sum w*x, sum w*y, sum w]
    for x, y, w in zip(log_rate.tolist(), share.tolist(), weight.tolist(), strict=True):
        blocks.append([w * x, w * y, w])
        while len(blocks) > 1 and (
            blocks[-2][1] * blocks[-1][2] > blocks[-1][1] * blocks[-2][2]
        ):  # the previous block's mean exceeds this one's: pool them
            last = blocks.pop()
            for position in range(3):
                blocks[-1][position] += last[position]
    return [(wx / w, wy / w, w) for wx, wy, w in blocks]


def crossing(blocks: Sequence[tuple[float, float, float]], target: float) -> float | None:
    """The log rate where the fitted blocks first reach `target`, interpolated between the
    last block below it and the first at or above it (log share linear in log rate when both
    are above 0, else share); None: no block straddles."""
    for below, above in itertools.pairwise(blocks):
        if below[1] < target <= above[1]:
            if below[1] > 0:  # the share grows about exponentially: interpolate its log
                fraction = math.log(target / below[1]) / math.log(above[1] / below[1])
            else:
                fraction = (target - below[1]) / (above[1] - below[1])
            return below[0] + fraction * (above[0] - below[0])
    return None


def _pooled(log_rate: np.ndarray, queries: np.ndarray, over_slo: np.ndarray) -> _Observations:
    """Probes at one rate summed into one point, sorted by rate; points with no queries
    dropped."""
    rates, inverse = np.unique(np.round(log_rate, 12), return_inverse=True)
    pooled_queries = np.bincount(inverse, weights=queries, minlength=rates.size)
    pooled_over = np.bincount(inverse, weights=over_slo, minlength=rates.size)
    kept = pooled_queries > 0
    return _Observations(rates[kept], pooled_queries[kept], pooled_over[kept])


def _log_rate_estimate(observations: _Observations, target: float) -> float | None:
    pooled = _pooled(observations.log_rate, observations.queries, observations.over_slo)
    if pooled.log_rate.size < 2:
        return None
    share = pooled.over_slo / pooled.queries
    blocks = isotonic_blocks(pooled.log_rate, share, pooled.queries)
    found = crossing(blocks, target)
    if found is not None:
        return found
    # Censored: below the lowest rate when every block is over the target, else above the top.
    if blocks[0][1] >= target:
        return -math.inf
    return math.inf


def pooled_design_effect(probes: Sequence[ProbeRecord]) -> float | None:
    """The probes' design effects pooled: their geometric mean weighted by over_slo (1 when
    none is over the SLO); None: no probe has one."""
    carrying = [probe for probe in probes if probe.design_effect is not None]
    if not carrying:
        return None
    total = sum(probe.over_slo for probe in carrying)
    if total == 0:
        return 1.0
    logs = sum(math.log(probe.design_effect or 1.0) * probe.over_slo for probe in carrying)
    return math.exp(logs / total)


def censored_design_effect(probes: Sequence[ProbeRecord], target: float) -> float | None:
    """The design effect of the search's bursts, robust to the bursts a probe did not see
    whole: a probe stopped early (abort_reason) cut its last burst, and a short window holds
    few. Bursts are about over_slo / d a probe; their mean size is the over-SLO total over the
    bursts seen whole (the censored exponential's estimate), and d = 2 mean - 1 (geometric
    sizes), never below the pooled d. Overloaded probes (share over OVERLOADED_SHARE_FACTOR x
    the target) are left out; None: no probe has a design effect."""
    pooled = pooled_design_effect(probes)
    if pooled is None:
        return None
    total = whole = 0.0
    for probe in probes:
        if probe.over_slo == 0 or probe.over_slo > OVERLOADED_SHARE_FACTOR * target * probe.queries:
            continue
        bursts = probe.over_slo / (probe.design_effect or 1.0)
        total += probe.over_slo
        whole += bursts - 1 if probe.abort_reason is not None else bursts
    if total == 0:
        return pooled
    return max(pooled, 2 * total / max(whole, 0.5) - 1)


def burst_degrees_of_freedom(
    probes: Sequence[ProbeRecord], log_estimate: float, effect: float
) -> float:
    """The bursts the crossing rests on: over_slo / d summed over the probes at the probed rates
    next below and above the estimate (at least 1), the degrees of freedom of the interval's
    variance."""
    rates = sorted({round(math.log(probe.rate), 12) for probe in probes})
    below = [rate for rate in rates if rate <= log_estimate]
    above = [rate for rate in rates if rate > log_estimate]
    beside = set(below[-1:] + above[:1])
    over = sum(probe.over_slo for probe in probes if round(math.log(probe.rate), 12) in beside)
    return max(1.0, over / effect)


def _burst_resampled(
    probes: Sequence[ProbeRecord], effect: float, replicates: int, rng: np.random.Generator
) -> np.ndarray:
    """over_slo redrawn with the variance its bursts give it (a log-normal of median T and
    sigma^2 = log(1 + d / T)), one shock per seed and replicate: probes of one seed share their
    arrivals, so a lucky path is lucky at every rate. Median, not mean, T: one window's count
    of a few heavy-tailed bursts usually lies below its mean, so the mean is above T as often
    as not (a redraw of mean T put the interval above the truth 4 times in 5 it missed)."""
    over_slo = np.empty((replicates, len(probes)))
    shocks: dict[int, np.ndarray] = {}
    for column, probe in enumerate(probes):
        if probe.seed not in shocks:
            shocks[probe.seed] = rng.standard_normal(replicates)
        if probe.over_slo == 0:
            over_slo[:, column] = 0.0
            continue
        sigma = math.sqrt(math.log1p(effect / probe.over_slo))
        over_slo[:, column] = probe.over_slo * np.exp(sigma * shocks[probe.seed])
    return over_slo


def _block_resampled(
    probes: Sequence[ProbeRecord], replicates: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(queries, over_slo) from each probe's time-ordered blocks resampled with replacement
    (the same indices for probes of one seed); a probe without blocks: binomially."""
    queries = np.empty((replicates, len(probes)))
    over_slo = np.empty((replicates, len(probes)))
    shared_indices: dict[tuple[int, int], np.ndarray] = {}
    for column, probe in enumerate(probes):
        if not probe.batches:
            queries[:, column] = probe.queries
            share = probe.over_slo / probe.queries
            over_slo[:, column] = rng.binomial(probe.queries, share, replicates)
            continue
        blocks = np.asarray(probe.batches, dtype=np.float64)
        key = (probe.seed, len(blocks))
        if key not in shared_indices:
            shared_indices[key] = rng.integers(0, len(blocks), (replicates, len(blocks)))
        picked = blocks[shared_indices[key]]  # (replicates, blocks, 2)
        queries[:, column] = picked[:, :, 0].sum(axis=1)
        over_slo[:, column] = picked[:, :, 1].sum(axis=1)
    return queries, over_slo


def _resampled_counts(
    probes: Sequence[ProbeRecord], replicates: int, rng: np.random.Generator, effect: float | None
) -> tuple[np.ndarray, np.ndarray]:
    """(queries, over_slo) of every probe in every replicate, shape (replicates, probes):
    by the design effect `effect` when the probes carry one, else by block bootstrap."""
    if effect is None:
        return _block_resampled(probes, replicates, rng)
    queries = np.tile(np.asarray([p.queries for p in probes], dtype=np.float64), (replicates, 1))
    return queries, _burst_resampled(probes, effect, replicates, rng)


def _interval(
    probes: Sequence[ProbeRecord], target: float, replicates: int, seed: int, log_estimate: float
) -> tuple[float, float] | None:
    """The 2.5% and 97.5% percentiles of the bootstrap estimates (in log rate, censored
    replicates at +-inf), each end's distance from the estimate widened by t(0.975, nu) /
    z(0.975) and clipped to the probed rates; None: a degenerate bootstrap."""
    rng = np.random.default_rng(seed)
    log_rate = np.log([probe.rate for probe in probes])
    effect = censored_design_effect(probes, target)
    queries, over_slo = _resampled_counts(probes, replicates, rng, effect)
    estimates = []
    for replicate in range(replicates):
        found = _log_rate_estimate(
            _Observations(log_rate, queries[replicate], over_slo[replicate]), target
        )
        estimates.append(math.inf if found is None else found)
    low, high = np.percentile(np.asarray(estimates), [2.5, 97.5], method="inverted_cdf")
    lowest, highest = float(log_rate.min()), float(log_rate.max())
    low, high = max(float(low), lowest), min(float(high), highest)
    freedom = burst_degrees_of_freedom(probes, log_estimate, effect or 1.0)
    widening = float(student_t.ppf(0.975, freedom)) / _Z_975
    low = max(lowest, log_estimate - max(log_estimate - low, 0.0) * widening)
    high = min(highest, log_estimate + max(high - log_estimate, 0.0) * widening)
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        return None
    return (math.exp(low), math.exp(high))


def estimate_capacity(
    probes: Sequence[ProbeRecord],
    percentile: float,
    replicates: int = BOOTSTRAP_REPLICATES,
    seed: int = BOOTSTRAP_SEED,
) -> CapacityEstimate:
    """The isotonic estimate of the rate at which the over-SLO share is 1 - percentile, and
    its bootstrap interval (reproducible: a fixed bootstrap seed), from the search probes."""
    method = ESTIMATE_METHOD.format(replicates=replicates)
    used = [probe for probe in probes if probe.queries > 0 and probe.rate > 0]
    if len(used) < 2:
        return CapacityEstimate(None, None, method)
    target = 1 - percentile
    observations = _Observations(
        np.log([probe.rate for probe in used]),
        np.asarray([probe.queries for probe in used], dtype=np.float64),
        np.asarray([probe.over_slo for probe in used], dtype=np.float64),
    )
    found = _log_rate_estimate(observations, target)
    if found is None or not math.isfinite(found):
        return CapacityEstimate(None, None, method)
    ci95 = _interval(used, target, replicates, seed, found)
    return CapacityEstimate(math.exp(found), ci95, method)

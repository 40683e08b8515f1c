"""Stopping a probe early, from the launcher's live progress events, once it is certain not to
be met: its over-SLO count already exceeds what LoadGen's rule allows for its planned size, or
its backlog grows with certainty. A growing backlog proves the miss; a probe that merely cannot
pass is recorded `missed` only when its counts prove it (else `undecided`, `cannot_pass`)."""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from stages.collocation.results import LauncherInterrupted, ProgressEvent
from stages.contracts.slo_verdict import SloRule

BACKLOG_MIN_S = 5.0
"""The backlog rule looks at no fewer seconds of progress reports than this."""
BACKLOG_MIN_SAMPLES = 8


class ProbeAborted(LauncherInterrupted):
    """Raised from the progress callback to stop a probe that can no longer pass; the launcher
    stops the run like an interruption (manifest status `interrupted`, the reason among its
    warnings) and keeps everything measured so far."""


@dataclass
class WatchedPipeline:
    """A pipeline whose verdict decides the probe: its offered rate, SLO and planned size."""

    rate_qps: float
    slo_ms: float
    planned_queries: int
    max_over_slo: int
    """The most over-SLO queries a probe of `planned_queries` may have and still be met (-1:
    it cannot be met at all, so the count rule never fires), or a sequential test's allowance."""
    backlog: list[tuple[float, int]] = field(default_factory=list)
    by_last_look: bool = False
    """`max_over_slo` is what the rate's last look allows (stages.capacity.sequential)."""


def watch(
    rate_qps: float,
    slo_ms: float,
    probe_s: float,
    rule: SloRule,
    percentile: float,
    max_over_slo: int | None = None,
) -> WatchedPipeline:
    """A pipeline to watch at `rate_qps` over a window of `probe_s`; `max_over_slo`: the most
    over-SLO queries it may count (a sequential test's allowance), else what the planned size
    allows."""
    planned = int(rate_qps * probe_s)
    if max_over_slo is not None:
        return WatchedPipeline(rate_qps, slo_ms, planned, max_over_slo, by_last_look=True)
    return WatchedPipeline(
        rate_qps, slo_ms, planned, rule.max_passing_over_slo(planned, percentile)
    )


class AbortMonitor:
    """The progress callback of one probe: raises `ProbeAborted` once (the first reason found,
    kept in `abort_reason`); `then` sees every event too (a display)."""

    def __init__(
        self,
        watched: dict[str, WatchedPipeline],
        then: Callable[[ProgressEvent], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.watched = watched
        self.abort_reason: str | None = None
        self.aborted_pipeline: str | None = None
        """The pipeline that could no longer pass."""
        self.overloaded = False
        """The backlog rule stopped the probe: its queue grows, so it is `missed`."""
        self._then = then
        self._clock = clock

    def __call__(self, event: ProgressEvent) -> None:
        if self._then is not None:
            self._then(event)
        if self.abort_reason is not None or event.kind != "progress":
            return
        pipeline = self.watched.get(event.pipeline or "")
        if pipeline is None:
            return
        # The backlog rule first: it is the evidence that proves a miss (an overloaded queue's
        # over-SLO queries are one growing burst, which the counts alone never prove). So a
        # probe that can no longer pass runs on until the backlog rule had its BACKLOG_MIN_S.
        reason = self._backlog_reason(pipeline, event.data)
        self.overloaded = reason is not None
        if reason is None:
            reason = cannot_pass(pipeline, int(event.data.get("measured_over_slo", 0)))
            if reason is not None and not _backlog_had_its_time(pipeline):
                return
        if reason is not None:
            if len(self.watched) > 1:
                reason = f"{event.pipeline}: {reason}"
            self.abort_reason = reason
            self.aborted_pipeline = event.pipeline
            raise ProbeAborted(reason)

    def _backlog_reason(self, pipeline: WatchedPipeline, data: dict[str, object]) -> str | None:
        issued = int(str(data.get("issued", 0)))
        if issued <= 0:
            return None
        pipeline.backlog.append((self._clock(), int(str(data.get("inflight", 0)))))
        return growing_backlog(pipeline.backlog, pipeline.rate_qps * pipeline.slo_ms / 1000)


def _backlog_had_its_time(pipeline: WatchedPipeline) -> bool:
    """Whether the backlog rule has seen BACKLOG_MIN_S of reports (it needs no more)."""
    samples = pipeline.backlog
    return len(samples) >= 2 and samples[-1][0] - samples[0][0] >= BACKLOG_MIN_S


def cannot_pass(pipeline: WatchedPipeline, over_slo: int) -> str | None:
    """The count rule: more queries over the SLO than a met probe of the planned size allows."""
    if pipeline.max_over_slo < 0 or over_slo <= pipeline.max_over_slo:
        return None
    if pipeline.by_last_look:
        return (
            f"cannot pass: {over_slo} over SLO > {pipeline.max_over_slo} allowed by the last look"
        )
    return (
        f"cannot pass: {over_slo} over SLO > {pipeline.max_over_slo} allowed for "
        f"{pipeline.planned_queries} planned"
    )


def growing_backlog(samples: list[tuple[float, int]], limit: float) -> str | None:
    """The backlog rule. With (time s, queries in flight) from the progress reports since the
    first issue, stop when, after at least BACKLOG_MIN_S and BACKLOG_MIN_SAMPLES reports,
    (1) the in-flight count now exceeds `limit` = rate x SLO, the queue that Little's law
    turns into a mean wait of the whole SLO, and (2) the least-squares slope of in-flight
    against time is positive with its 95% interval above zero. The slope's standard error is
    inflated by the AR(1) factor (1 + r1) / (1 - r1) of the residuals' lag-1 correlation r1,
    since a queue's length is autocorrelated and a plain OLS interval would be too narrow; and
    as the test is repeated at every report, the 95% holds for the whole probe (Bonferroni:
    each look with n reports so far uses the one-sided 1 - 0.025 / n quantile). An overloaded
    open-loop queue grows linearly (slope = rate - service rate, hundreds of queries over a
    few seconds), so it still fires within seconds; a stable queue fluctuates around its mean
    and rarely meets both conditions."""
    if len(samples) < BACKLOG_MIN_SAMPLES or samples[-1][0] - samples[0][0] < BACKLOG_MIN_S:
        return None
    if samples[-1][1] <= limit:
        return None
    slope, low = slope_interval(samples)
    if not low > 0:
        return None
    return (
        f"backlog grows: {samples[-1][1]} in flight > {limit:.0f} (rate x SLO), "
        f"+{slope:.1f}/s (95% interval from {low:.1f}/s)"
    )


def slope_interval(samples: list[tuple[float, int]]) -> tuple[float, float]:
    """(OLS slope, lower end of its interval), AR(1)-inflated and Bonferroni-corrected over
    the len(samples) looks, as above."""
    count = len(samples)
    times = [t for t, _ in samples]
    values = [float(v) for _, v in samples]
    mean_t, mean_v = sum(times) / count, sum(values) / count
    sxx = sum((t - mean_t) ** 2 for t in times)
    if sxx <= 0:
        return 0.0, -math.inf
    slope = sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True)) / sxx
    residuals = [v - mean_v - slope * (t - mean_t) for t, v in zip(times, values, strict=True)]
    squares = sum(r * r for r in residuals)
    if squares == 0:
        return slope, slope if slope > 0 else -math.inf
    lag1 = sum(a * b for a, b in itertools.pairwise(residuals)) / squares
    lag1 = min(max(lag1, 0.0), 0.9)
    variance = squares / (count - 2) / sxx * (1 + lag1) / (1 - lag1)
    return slope, slope - t_quantile(1 - 0.025 / count, count - 2) * math.sqrt(variance)


def t_quantile(probability: float, degrees: int) -> float:
    """Student's t quantile (Cornish-Fisher expansion about the normal's; within 1% of the
    exact value from 5 degrees of freedom up at the 97.5% quantile)."""
    z = statistics.NormalDist().inv_cdf(probability)
    n = max(degrees, 1)
    return z + (z**3 + z) / (4 * n) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * n * n)

"""Running one probe: the probe's spec as an ordinary run (its run directory under the search's
`probes/`), stopped early when it can no longer pass, then its record (`ProbeRecord`) from every
measured query's verdict latency, by the injected SLO rule. A run that fails or crashes is
recorded with the reason; only an interruption (Ctrl-C) or a run that cannot start propagates."""

from __future__ import annotations

import itertools
import math
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stages.capacity.clustering import design_effect, effective_counts
from stages.capacity.controller import ProbeRequest
from stages.capacity.early_abort import AbortMonitor, WatchedPipeline, watch
from stages.capacity.probe_spec import (
    judged_slo_ms,
    pipelines_of,
    probe_spec,
    probe_window_s,
)
from stages.capacity.search_services import SearchServices
from stages.collocation.launcher import (
    LauncherInterruptedWithResult,
    ProgressEvent,
    RunOptions,
    RunResult,
    run_benchmark,
)
from stages.contracts.capacity_files import PipelineProbe, ProbeRecord, SearchSettings, Verdict
from stages.contracts.slo_verdict import SloRule
from stages.rundir.manifest import read_manifest_document
from stages.validation.loading import LoadedSpec

BATCHES = 10
"""Successive blocks of the target's measured queries recorded per probe (block bootstrap)."""


@dataclass
class ProbeExecutor:
    """Runs the probes of one search; `next_index` numbers them (resumed searches start past
    the recorded ones)."""

    loaded: LoadedSpec
    settings: SearchSettings
    probe_runs_dir: Path
    cache_dir: Path
    rule: SloRule
    verdict_latencies: Callable[[Path], dict[str, list[float]]]
    next_index: int = 0
    on_event: Callable[[ProgressEvent], None] | None = None
    environment: dict[str, object] | None = None
    """The environment the first probe captured, recorded as is by the later ones."""
    _clients: dict[str, int] = field(default_factory=dict, init=False)
    """The ceiling probe's closed-loop clients per searched pipeline (empty for other probes)."""
    services: SearchServices = field(default_factory=lambda: SearchServices({}))
    """The spec's services, up for the whole search (`search_services`)."""

    def __call__(self, request: ProbeRequest) -> ProbeRecord:
        index = self.next_index
        spec = probe_spec(self.loaded, request, self.settings, self.services.shared)
        self._clients = {
            pipeline.name: pipeline.loadgen.concurrency
            for pipeline in spec.spec.pipelines
            if request.kind == "ceiling" and pipeline.loadgen.type == "closed_loop"
        }
        monitor = AbortMonitor(self._watched(request), then=self.on_event)
        options = RunOptions(
            out_dir=self.probe_runs_dir,
            cache_dir=self.cache_dir,
            run_id=probe_run_id(index, request),
            progress=monitor,
            environment=self.environment,
        )
        started = time.monotonic()
        try:
            result = run_benchmark(spec, options)
        except LauncherInterruptedWithResult as stopped:
            if monitor.abort_reason is None:
                raise  # Ctrl-C or SIGTERM: the search stops, this probe is not recorded
            result = stopped.result
        duration_s = time.monotonic() - started
        self.services.raise_if_dead()  # before anything is recorded: this probe is not kept
        self.next_index += 1
        if self.environment is None:
            self.environment = _environment_of(result.run_dir)
        record = self.record(
            index, request, result, monitor.abort_reason, duration_s, monitor.overloaded
        )
        return _missed_by(record, monitor.aborted_pipeline if monitor.overloaded else None)

    def _watched(self, request: ProbeRequest) -> dict[str, WatchedPipeline]:
        """The pipelines whose verdict decides a search probe (none for a closed loop)."""
        if request.kind != "search":
            return {}
        settings = self.settings
        window = probe_window_s(request, settings)
        return {
            name: watch(
                request.rate * scale,
                self._slo_ms(name),
                window,
                self.rule,
                settings.percentile,
                request.max_over_slo,
            )
            for name, scale in pipelines_of(settings).items()
            if scale is not None
        }

    def _slo_ms(self, name: str) -> float:
        """A ray's pipelines are judged by their own SLOs (`ray_slo_ms`), a single target by
        the search's (--slo-ms or the spec's); a co-runner keeps its own (inf: no verdict)."""
        judged = judged_slo_ms(name, self.settings)
        if judged is not None:
            return judged
        spec = next(p for p in self.loaded.spec.pipelines if p.name == name)
        return spec.loadgen.slo_ms or math.inf

    def record(
        self,
        index: int,
        request: ProbeRequest,
        result: RunResult,
        abort_reason: str | None,
        duration_s: float,
        overloaded: bool = False,
    ) -> ProbeRecord:
        """The probe's record from its finished (or stopped, or failed) run directory. A probe
        stopped by the backlog rule (`overloaded`) is missed; one stopped by the count rule is
        missed only when its counts so far prove it, else undecided and `cannot_pass`."""
        failure = _failure(result)
        try:
            latencies = self.verdict_latencies(result.run_dir)
        except Exception as error:  # a run that left no readable data is still a probe
            latencies = {}
            failure = failure or f"no data: {type(error).__name__}: {error}"
        # A stopped probe's window is cut short at an instant its rows do not give: no rates.
        planned_s = probe_window_s(request, self.settings)
        # One query at a time ends between probe_s and the planned window: no rate either.
        window_s = None if abort_reason or request.kind == "unloaded" else planned_s
        pipelines = self._pipelines(request, latencies, window_s)
        searched = [name for name, scale in pipelines_of(self.settings).items() if scale]
        verdict = combined_verdict([pipelines[name].verdict for name in searched])
        if request.kind == "ceiling":
            verdict = None
        elif abort_reason is not None:
            verdict = "missed" if overloaded or verdict == "missed" else "undecided"
        elif failure is not None and verdict != "missed":
            verdict = "undecided"
        return ProbeRecord(
            index=index,
            kind=request.kind,
            rate=request.rate,
            seed=request.seed,
            queries=sum(pipelines[name].queries for name in searched),
            over_slo=sum(pipelines[name].over_slo for name in searched),
            verdict=verdict,
            p99_ms=_worst([pipelines[name].p99_ms for name in searched]),
            abort_reason=abort_reason or failure,
            cannot_pass=abort_reason is not None and not overloaded and verdict != "missed",
            run_dir=str(result.run_dir),
            throughput_qps=_total([pipelines[name].throughput_qps for name in searched]),
            duration_s=round(duration_s, 3),
            window_s=round(planned_s, 3),
            batches=self._batches(latencies, searched),
            pipelines=pipelines,
            design_effect=self._design_effect(latencies, searched),
        )

    def _design_effect(
        self, latencies: dict[str, list[float]], searched: list[str]
    ) -> float | None:
        """The searched pipelines' burst design effect (the largest, for a ray)."""
        effects = [
            design_effect([latency > self._slo_ms(name) for latency in latencies[name]])
            for name in searched
            if latencies.get(name)
        ]
        return max(effects) if effects else None

    def _batches(
        self, latencies: dict[str, list[float]], searched: list[str]
    ) -> list[tuple[int, int]]:
        """Block counts of the searched pipelines, added block by block (a ray has several)."""
        merged = [[0, 0] for _ in range(BATCHES)]
        for name in searched:
            for block, (queries, over) in enumerate(
                batches_of(latencies.get(name, []), self._slo_ms(name))
            ):
                merged[block][0] += queries
                merged[block][1] += over
        return [(queries, over) for queries, over in merged] if any(latencies.values()) else []

    def _pipelines(
        self, request: ProbeRequest, latencies: dict[str, list[float]], window_s: float | None
    ) -> dict[str, PipelineProbe]:
        figures = {}
        for name, scale in pipelines_of(self.settings).items():
            if scale is not None:
                rate = None if request.kind != "search" else request.rate * scale
            else:
                rate = self.settings.with_rates[name]
            figures[name] = pipeline_probe(
                latencies.get(name, []),
                self._slo_ms(name),
                rate,
                window_s,
                self,
                self._clients.get(name) if scale is not None else None,
            )
        return figures


def pipeline_probe(
    latencies: Sequence[float],
    slo_ms: float,
    rate_qps: float | None,
    window_s: float | None,
    executor: ProbeExecutor,
    clients: int | None = None,
) -> PipelineProbe:
    """One pipeline's figures in one probe (slo_ms inf: it has no SLO, so no verdict). The
    verdict counts its queries as independent ones after the design effect of its bursts
    (stages.capacity.clustering), as the simulated probe does. `clients`: the closed loop's
    concurrency of a ceiling probe, whose throughput is then Little's law's (below)."""
    flags = [latency > slo_ms for latency in latencies]
    over = sum(flags)
    verdict: Verdict | None = None
    if math.isfinite(slo_ms):
        counted = effective_counts(len(latencies), over, design_effect(flags))
        verdict = executor.rule.verdict(*counted, executor.settings.percentile)
    return PipelineProbe(
        rate_qps=rate_qps,
        queries=len(latencies),
        over_slo=over,
        verdict=verdict,
        p99_ms=nearest_rank(latencies, 0.99),
        throughput_qps=_throughput(latencies, window_s, clients),
    )


def _throughput(
    latencies: Sequence[float], window_s: float | None, clients: int | None
) -> float | None:
    """Completed queries per second. A closed loop's queries issued in the window all complete,
    the last `clients` of them after it, so completed / window overstates its rate by up to
    clients / window (64 clients in a 4 s window: +16 q/s). For the ceiling probe they are
    counted over the window plus the slowest latency instead: the span from the first issue to
    about the last completion. (Little's law, clients / mean latency, reads high as well: the
    first queries of the window meet an empty queue.)"""
    completed = [latency for latency in latencies if math.isfinite(latency)]
    if not window_s:
        return None
    span_s = window_s + (max(completed) / 1e3 if clients and completed else 0.0)
    return len(completed) / span_s


def nearest_rank(values: Sequence[float], percentile: float) -> float | None:
    """The nearest-rank percentile (failures, +inf, included); None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(percentile * len(ordered)) - 1)]


def batches_of(
    latencies: Sequence[float], slo_ms: float, count: int = BATCHES
) -> list[tuple[int, int]]:
    """(queries, over_slo) of `count` successive blocks of the measured queries, in order."""
    if not latencies:
        return []
    bounds = [round(i * len(latencies) / count) for i in range(count + 1)]
    return [
        (end - start, sum(1 for latency in latencies[start:end] if latency > slo_ms))
        for start, end in itertools.pairwise(bounds)
    ]


def combined_verdict(verdicts: Sequence[Verdict | None]) -> Verdict | None:
    """All met: met; any missed: missed; else undecided (None: no verdict at all)."""
    known = [verdict for verdict in verdicts if verdict is not None]
    if not known:
        return None
    if "missed" in known:
        return "missed"
    return "met" if all(verdict == "met" for verdict in known) else "undecided"


def probe_run_id(index: int, request: ProbeRequest) -> str:
    """The probe's run directory name: order, kind, rate, seed and a random tail (a probe cut
    short by Ctrl-C is run again under a new name; 48 bits, so the probes of every search, on
    every host, keep apart as run ids in one warehouse)."""
    rate = "closed" if request.kind == "ceiling" else f"{request.rate:.4g}qps"
    return f"p{index:02d}-{request.kind}-{rate}-seed{request.seed}-{secrets.token_hex(6)}"


def _missed_by(record: ProbeRecord, pipeline: str | None) -> ProbeRecord:
    """The record with the stopped pipeline's own verdict `missed` (its rows stop early, so
    their verdict alone may read undecided)."""
    if pipeline is None or pipeline not in record.pipelines:
        return record
    stopped = record.pipelines[pipeline].model_copy(update={"verdict": "missed"})
    return record.model_copy(update={"pipelines": {**record.pipelines, pipeline: stopped}})


def _environment_of(run_dir: Path) -> dict[str, object] | None:
    """The environment a run's manifest recorded (None when it has none)."""
    try:
        environment = read_manifest_document(run_dir).get("environment")
    except Exception:  # a probe without a readable manifest: the next one probes again
        return None
    return environment if isinstance(environment, dict) and environment else None


def _failure(result: RunResult) -> str | None:
    """Why the run failed (a worker crash, a timeout, an exhausted error budget), or None."""
    failed = [f"{o.pipeline}: {o.status}: {o.error}" for o in result.results if o.status != "ok"]
    if result.status == "interrupted":
        return None  # stopped by the abort monitor: its reason says why
    return f"run failed: {'; '.join(failed)}" if failed else None


def _worst(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return max(known) if known else None


def _total(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) if known else None

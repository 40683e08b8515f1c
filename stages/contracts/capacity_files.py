"""The capacity search's files, one contract for the writer (stages.capacity) and the reader (the
warehouse, analysis.capacity.file_reader): the file names of a search directory
(`search.json`, `probes.jsonl`, `capacity.json`, the probes' run directories under `probes/`)
and of a region directory (`region.json`), and the records written to them: one probe
(`ProbeRecord`, a line of `probes.jsonl`), the search's settings (`SearchSettings`) and result
(`CapacityResult`), and a region (`RegionResult` with its `RayResult`s and `SoloCapacity`s). The
field names are the output contract (docs/contracts.md). A leaf: pydantic and the standard
library only."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from stages.contracts.slo_verdict import SloVerdict

Verdict = SloVerdict
"""A probe's SLO verdict: `met` by LoadGen's early-stopping rule, `missed` by its mirror
binomial test, else `undecided` (stages.contracts.slo_verdict.slo_verdict_by_counts)."""

StopReason = Literal["converged", "max_probes", "infeasible", "ceiling", "undecidable", "budget"]
"""Why a search ended: the bracket is within the precision; the probe budget ran out; the SLO
is missed even without queueing (the unloaded probe missed it, or the ceiling probe completed
nothing); the rate reached the measured ceiling and still met it; nothing met down to the
lowest rate the time budget can decide the percentile at; the time budget ran out with a
bracket wider than the precision. CapacityResult.stop_detail says which evidence decided."""

ProbeKind = Literal["ceiling", "search", "unloaded"]
"""`ceiling`: the closed-loop probe that measures the most the pipeline completes next to its
co-runners (no verdict); `search`: an open-loop probe at one rate; `unloaded`: one query at a
time (closed loop, one client), run once nothing has met: no queueing, so a miss there proves
the SLO infeasible at every rate."""

ScalingSource = Literal["certified", "estimate"]
"""Which solo capacity the rays scale by: the certified one (conservative), else the estimate."""

SEARCH_FILE = "search.json"
PROBES_FILE = "probes.jsonl"
CAPACITY_FILE = "capacity.json"
REGION_FILE = "region.json"
PROBE_RUNS_DIR = "probes"
"""A search directory's folder of probe run directories (one per real probe)."""
WITH_ALIAS = "with"
"""`with_rates` of SearchSettings and CapacityResult is written as `with` (by alias)."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PipelineProbe(_Record):
    """One pipeline's figures in one probe (the target's, and each co-runner's)."""

    rate_qps: float | None = Field(description="Offered rate; None for the ceiling probe.")
    queries: int = Field(description="Measured queries (warm-up excluded), failures included.")
    over_slo: int = Field(description="Measured queries over the SLO, failures counted as over.")
    verdict: Verdict | None = Field(description="None: the pipeline has no SLO.")
    p99_ms: float | None = Field(description="p99 of every measured query (failures as +inf).")
    throughput_qps: float | None = Field(None, description="Completed ok queries per second.")


class ProbeRecord(_Record):
    """One probe of a search: a real (or simulated) run at one offered load."""

    index: int = Field(description="0, 1, ... in the order the probes ran.")
    kind: ProbeKind = Field("search", description="ceiling | search | unloaded")
    rate: float = Field(
        description="The searched variable: the target's offered rate in queries/s, or for a "
        "region ray the scale s (pipeline i offered s * direction_i * solo capacity_i)."
    )
    seed: int = Field(description="The spec seed the probe ran with (re-probes take the next).")
    queries: int = Field(description="The target's measured queries, failures included.")
    over_slo: int = Field(description="The target's measured queries over the SLO (failures too).")
    verdict: Verdict | None = Field(
        description="The probe's verdict (for a ray: met when every pipeline met, missed when "
        "any missed); None for the ceiling probe."
    )
    p99_ms: float | None = Field(description="The target's p99 (every measured query).")
    abort_reason: str | None = Field(
        None, description="Why the probe stopped early (it could no longer pass), or failed."
    )
    run_dir: str | None = Field(description="The probe's run directory; None when simulated.")
    flagged: bool = Field(
        False,
        description="The last stage of a rate undecided at every look of its sequential test "
        "(stages.capacity.sequential): counted as not met and flagged.",
    )
    confirming: bool = Field(
        False,
        description="The second phase: a probe with the longer window that confirms the "
        "certified rate (stages.capacity.confirmation); the bisection ignores it.",
    )
    cannot_pass: bool = Field(
        False,
        description="Stopped early because its over-SLO count already exceeded what a met "
        "probe of its planned size may have: not met (no re-probe), yet `missed` only when "
        "the counts so far prove it.",
    )
    throughput_qps: float | None = Field(None, description="The target's completed ok queries/s.")
    duration_s: float | None = Field(None, description="Wall time of the probe.")
    window_s: float | None = Field(
        None,
        description="The measured window the probe was planned for: max(probe_s, min_queries / "
        "rate of the slowest searched pipeline), at most the budget's per-probe cap "
        "(stages.capacity.probe_plan). None: recorded before windows were sized by rate.",
    )
    batches: list[tuple[int, int]] = Field(
        default_factory=list,
        description="(queries, over_slo) of the target in ten successive blocks of its "
        "measured queries, for the block bootstrap of the estimate's interval.",
    )
    pipelines: dict[str, PipelineProbe] = Field(
        default_factory=dict, description="Every pipeline of the probe by name."
    )
    design_effect: float | None = Field(
        None,
        description="Variance inflation of the target's over-SLO count from its bursts "
        "(stages.capacity.clustering); the verdict counts queries / d and over_slo / d. "
        "None: the verdict used the raw counts.",
    )


class SearchSettings(_Record):
    """What one search was asked (search.json): enough to resume it exactly."""

    search_id: str = Field(description="The search's folder name under --out.")
    spec_source: str | None = Field(None, description="The spec file.")
    spec_hash: str | None = Field(None, description="sha256 of the normalized spec.")
    pipeline: str = Field(description="The target pipeline (for a ray: 'A+B').")
    slo_ms: float = Field(gt=0, description="The latency objective.")
    percentile: float = Field(0.99, gt=0, lt=1, description="The percentile the SLO bounds.")
    precision: float = Field(0.05, gt=0, description="Stop when hi / lo <= 1 + precision.")
    max_probes: int = Field(20, ge=1, description="Probe budget, the ceiling probe included.")
    probe_s: float = Field(gt=0, description="Each probe's measured window (duration_s).")
    with_rates: dict[str, float] = Field(
        default_factory=dict,
        alias=WITH_ALIAS,
        description="Co-runners at fixed offered rates (queries/s), run in every probe.",
    )
    base_seed: int = Field(0, description="The first probe's seed (the spec's).")
    min_rate: float | None = Field(
        None,
        gt=0,
        description="A floor: the search probes no rate below this (None: as low as the time "
        "budget can decide the percentile).",
    )
    min_queries: int | None = Field(
        None,
        ge=1,
        description="Measured queries a search probe holds at least (None: the fewest with "
        "which LoadGen's rule can pass the percentile: 459 at p99).",
    )
    budget_s: float | None = Field(
        None,
        gt=0,
        description="The search's time budget in seconds (--budget-min): it starts no probe "
        "that would end past it, and no probe measures longer than a sixth of it. None: "
        "unbounded.",
    )
    ray: dict[str, float] | None = Field(
        None,
        description="Region rays only: pipeline -> its solo capacity times the ray's direction "
        "component (its offered rate is rate * this).",
    )
    ray_slo_ms: dict[str, float] | None = Field(
        None,
        description="Region rays only: each pipeline's own SLO (its spec's slo_ms), which its "
        "verdict in every probe is decided against; slo_ms is then the smallest of them.",
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class CapacityResult(_Record):
    """capacity.json: the answer and how it was reached."""

    search_id: str
    pipeline: str
    slo_ms: float
    percentile: float
    with_rates: dict[str, float] = Field(alias=WITH_ALIAS, description="Co-runners' fixed rates.")
    certified_qps: float | None = Field(
        description="The highest met rate below the lowest not-met one (conservative: each met "
        "verdict bounds the percentile at 99%); None when nothing met."
    )
    estimate_qps: float | None = Field(
        description="Where an isotonic fit of the over-SLO share against rate crosses "
        "1 - percentile; None when the probes do not straddle it."
    )
    estimate_ci95: tuple[float, float] | None = Field(
        description="95% interval of the estimate: a bootstrap of the probes' bursty over-SLO "
        "counts, widened for the few bursts behind it (stages.capacity.estimate); an end the "
        "bootstrap cannot place is the probed range's."
    )
    bracket: tuple[float, float | None] = Field(
        description="[lo, hi]: the certified rate and the lowest rate above it proven missed "
        "(LoadGen's mirror test at 99%, or a growing backlog), so the capacity lies in it at "
        "99% either side; hi None: nothing above lo was proven missed. The search itself "
        "converges on the lowest rate not met, which may lie below hi."
    )
    probes: list[ProbeRecord]
    stop_reason: StopReason
    ceiling_qps: float | None = Field(None, description="The ceiling probe's throughput.")
    monotonicity_violations: int = Field(
        0, description="Pairs of probes out of monotone order (a met rate above a missed one)."
    )
    flagged_probes: int = Field(
        0, description="Rates undecided at every look of their sequential test."
    )
    stop_detail: str | None = Field(
        None,
        description="The evidence behind the stop reason, in a sentence (the unloaded "
        "percentile that proves `infeasible`, the budget that would decide an `undecidable`).",
    )
    spent_s: float | None = Field(None, description="Wall time of every probe, in seconds.")
    estimate_method: str = Field(
        "PAVA isotonic fit of over_slo/queries on log rate; 95% interval: block bootstrap",
        description="How the estimate and its interval were computed.",
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class SoloCapacity(_Record):
    """One pipeline alone: the solo search's answer and the capacity the rays scale by."""

    pipeline: str
    search_id: str = Field(description="The solo search; its folder is <out>/<search_id>.")
    slo_ms: float
    certified_qps: float | None
    estimate_qps: float | None
    estimate_ci95: tuple[float, float] | None
    stop_reason: StopReason
    scaling_qps: float | None = Field(
        description="C: the capacity the rays scale this pipeline's rate by (None: neither a "
        "certified capacity nor an estimate, so the region cannot be searched)."
    )
    scaling_source: ScalingSource | None = Field(
        description="certified, or estimate when nothing was certified."
    )


class RayResult(_Record):
    """One ray's search: the scale s it reached along its direction."""

    index: int = Field(ge=1, description="k = 1..rays, from the A axis towards the B axis.")
    angle_deg: float = Field(gt=0, lt=90, description="t_k = 90 k / (rays + 1).")
    direction: dict[str, float] = Field(description="A: cos t, B: sin t.")
    solo_capacity_qps: dict[str, float] = Field(description="C_A, C_B this ray scaled by.")
    search_id: str = Field(description="The ray's search; its folder is <out>/<search_id>.")
    certified_s: float | None = Field(
        description="The search's certified scale s (None: none met)."
    )
    estimate_s: float | None
    estimate_ci95_s: tuple[float, float] | None
    bracket_s: tuple[float, float | None]
    stop_reason: StopReason
    probes: int = Field(description="Probes the ray's search ran.")
    monotonicity_violations: int = 0
    flagged_probes: int = 0
    certified_point: dict[str, float] | None = Field(
        description="Each pipeline's offered rate (queries/s) at the certified s."
    )
    normalised: tuple[float, float] | None = Field(
        description="(x, y) = (s cos t, s sin t) at the certified s: rate / solo capacity."
    )
    normalised_estimate: tuple[float, float] | None = Field(
        None, description="(x, y) at the estimated s."
    )


class RegionResult(_Record):
    """region.json: two pipelines' solo capacities and the boundary reached along each ray."""

    region_id: str = Field(description="The region's folder name under --out.")
    spec_source: str | None = None
    spec_hash: str | None = None
    pipelines: tuple[str, str] = Field(description="[A, B]: A is x, B is y.")
    ray_count: int = Field(ge=1, description="Rays asked for (strictly inside the quadrant).")
    percentile: float
    slo_ms: dict[str, float] = Field(description="Each pipeline's own SLO (from the spec).")
    solo: dict[str, SoloCapacity]
    rays: list[RayResult] = Field(description="The rays finished so far, by index.")
    complete: bool = Field(description="Every ray has finished.")
    note: str | None = Field(None, description="Why the region stopped early, if it did.")

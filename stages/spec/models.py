"""Pydantic models of the benchmark spec YAML (the user contract: README, "A benchmark spec").

Every model forbids unknown keys so a typo is an error, not a silently ignored setting.
Structural rules live here; rules that need the stage registry or the whole graph (unknown
stage types, edges, cycles) live in `stages.spec.checks`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

STAGE_ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]*$"


class StrictModel(BaseModel):
    """Base of every config model: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


LoadgenType = Literal[
    "offline",
    "single_stream",
    "multi_stream",
    "server",
    "poisson",
    "constant",
    "closed_loop",
    "trace",
]


class LoadgenSpec(StrictModel):
    """How queries arrive at a pipeline and when its load window ends."""

    type: LoadgenType = Field(
        "single_stream",
        description="Arrival process / MLPerf scenario; `poisson` is an alias of `server`.",
    )
    rate: float | None = Field(
        None, gt=0, description="Target arrival rate in queries/s (server, constant)."
    )
    burstiness: float = Field(
        1.0,
        gt=0,
        description="Gamma shape of inter-arrival times for server: 1 = Poisson, >1 smoother, "
        "<1 burstier.",
    )
    concurrency: int = Field(1, ge=1, description="Concurrent clients for closed_loop.")
    think_time_ms: float = Field(
        0.0, ge=0, description="closed_loop: pause between a completion and the next query."
    )
    samples_per_query: int = Field(
        1,
        ge=1,
        description="multi_stream: samples per query; offline: total samples issued at once.",
    )
    trace: str | None = Field(
        None,
        description="trace: CSV or Parquet file with column `offset_ms` (and optional `samples`).",
    )
    duration_s: float = Field(10.0, ge=0, description="Minimum length of the load window.")
    min_queries: int = Field(0, ge=0, description="Minimum number of queries to issue.")
    max_queries: int | None = Field(
        None, ge=1, description="Stop issuing after this many queries (warm-up included)."
    )
    warmup_queries: int = Field(
        0, ge=0, description="First queries flagged `warmup` and excluded from results."
    )
    warmup_s: float = Field(
        0.0, ge=0, description="Queries scheduled in the first seconds are flagged `warmup`."
    )
    queue_depth: int = Field(64, ge=1, description="Capacity of each stage's input queue.")
    on_full: Literal["drop", "backlog"] = Field(
        "drop",
        description="Open loop, entry queue full: record the query `dropped`, or wait and "
        "issue it late (the delay shows as issue delay).",
    )
    timeout_s: float = Field(
        120.0,
        gt=0,
        description="Hard limit of the load window including drain; queries still running "
        "then are recorded `timeout`.",
    )
    slo_ms: float | None = Field(
        None, gt=0, description="Latency bound the target percentile is checked against."
    )

    @field_validator("type")
    @classmethod
    def _canonical_type(cls, value: str) -> str:
        return "server" if value == "poisson" else value

    @model_validator(mode="after")
    def _needs_its_fields(self) -> LoadgenSpec:
        if self.type in ("server", "constant") and self.rate is None:
            raise ValueError(f"loadgen type '{self.type}' needs `rate` (queries/s)")
        if self.type == "trace" and not self.trace:
            raise ValueError("loadgen type 'trace' needs `trace` (a CSV or Parquet file)")
        if self.max_queries is not None and self.max_queries < self.min_queries:
            raise ValueError("max_queries must be at least min_queries")
        if self.type == "offline":
            if self.samples_per_query == 1 and self.max_queries is None:
                raise ValueError(
                    "offline issues `samples_per_query` samples at once: set it (e.g. 10000)"
                )
            if self.warmup_s > 0:
                raise ValueError(
                    "offline issues everything at time zero, so warmup_s would flag it all; "
                    "use warmup_queries"
                )
        self._timeout_covers_the_window()
        return self

    def _timeout_covers_the_window(self) -> None:
        """timeout_s ends the load whatever else happens, so one that cannot cover the warm-up
        and the measured duration would cut every run short and silently shrink the window."""
        terms = [f"duration_s {self.duration_s:g}", f"warmup_s {self.warmup_s:g}"]
        needed_s = self.duration_s + self.warmup_s
        if self.rate is not None and self.warmup_queries:
            needed_s += self.warmup_queries / self.rate
            terms.append(f"warmup_queries {self.warmup_queries} / rate {self.rate:g}")
        if not self.timeout_s > needed_s:
            raise ValueError(
                f"timeout_s {self.timeout_s:g} cannot cover warm-up plus duration: it must "
                f"exceed {' + '.join(terms)} = {needed_s:g} s"
            )


class PlacementSpec(StrictModel):
    """Where a pipeline's worker process runs; applied before torch or CUDA initialise."""

    cpus: list[int] | None = Field(None, description="CPU cores the worker may run on.")
    threads: int | None = Field(None, ge=1, description="torch intra-op threads.")
    gpu: int | str | None = Field(
        None, description="GPU index or UUID (MIG UUIDs too) for CUDA_VISIBLE_DEVICES."
    )
    mps_thread_percentage: int | None = Field(
        None, ge=1, le=100, description="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE in `mps` mode."
    )
    mig: str | None = Field(None, description="MIG instance UUID in `mig` mode.")

    @field_validator("cpus")
    @classmethod
    def _cpus_non_negative(cls, value: list[int] | None) -> list[int] | None:
        if value is not None:
            if not value:
                raise ValueError("cpus must list at least one core")
            if any(cpu < 0 for cpu in value):
                raise ValueError("cpu indices must be >= 0")
        return value


class StageSpec(StrictModel):
    """One node of a pipeline graph: a registered stage type, its config and its edges."""

    id: str = Field(..., pattern=STAGE_ID_PATTERN, description="Unique id within the pipeline.")
    type: str = Field(..., description="A registered stage type (`collobench schema` lists them).")
    config: dict[str, object] = Field(
        default_factory=dict, description="The stage type's own config model."
    )
    outputs: list[str] = Field(
        default_factory=list, description="Downstream stage ids; none = pipeline output."
    )
    input_policy: Literal["any", "priority", "join"] = Field(
        "any",
        description="Several inputs: first come first served, by `priorities`, or join by "
        "query id.",
    )
    priorities: list[str] | None = Field(
        None, description="priority policy: input stage ids, most urgent first."
    )
    max_visits: int | None = Field(
        None, ge=1, description="Bound on visits per query; required for a stage on a cycle."
    )


class PipelineSpec(StrictModel):
    """One ML pipeline: a stage graph driven by its own load generator, in its own process."""

    name: str = Field(..., pattern=STAGE_ID_PATTERN, description="Unique pipeline name.")
    device: str = Field("cpu", pattern=r"^(cpu|cuda(:[0-9]+)?)$", description="cpu | cuda | cuda:N")
    placement: PlacementSpec = Field(default_factory=PlacementSpec)
    loadgen: LoadgenSpec = Field(default_factory=LoadgenSpec)
    error_budget: int | None = Field(
        100,
        ge=1,
        description="Stop the pipeline (status failed) after this many failed queries; "
        "null = never.",
    )
    stages: list[StageSpec] = Field(..., min_length=1, description="The stage graph.")


class CollocationSpec(StrictModel):
    """How the pipelines share the device, and whether solo baselines are measured."""

    mode: Literal["time_slice", "mps", "mig", "cpu_pinned"] = Field(
        "time_slice", description="Device sharing mechanism."
    )
    solo_baselines: bool = Field(
        True, description="Also run each pipeline alone, same seed and schedule."
    )
    subsets: Literal["none", "pairs", "all"] = Field(
        "none",
        description="Also run subsets of the pipelines together, for the interference matrix: "
        "none; pairs (one phase per pair); all (every subset of 2..n-1 pipelines, 2^n phases, "
        "at most 6 pipelines). Phase `collocated:a+b` runs a and b; `collocated` runs them all.",
    )

    @model_serializer(mode="wrap")
    def _omit_default_subsets(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """Leave `subsets: none` out of the dump, so the normal form, and so the spec hash, of
        every spec written before the field existed is unchanged (`compare` matches hashes)."""
        data: dict[str, object] = handler(self)
        if data.get("subsets") == "none":
            data.pop("subsets")
        return data


class GpuTelemetrySpec(StrictModel):
    enabled: bool = Field(True, description="Sample NVML when an NVIDIA GPU is present.")
    period_ms: float = Field(50.0, ge=1, description="NVML sampling period.")


class HostTelemetrySpec(StrictModel):
    enabled: bool = Field(True, description="Sample host and per-pipeline CPU/RSS.")
    period_ms: float = Field(100.0, ge=1, description="Host sampling period.")


class PowerModelSpec(StrictModel):
    cpu_watts_per_core: float = Field(
        ..., gt=0, description="Estimated watts per fully busy core (energy source model_estimate)."
    )


class TelemetrySpec(StrictModel):
    gpu: GpuTelemetrySpec = Field(default_factory=GpuTelemetrySpec)
    host: HostTelemetrySpec = Field(default_factory=HostTelemetrySpec)
    power_model: PowerModelSpec | None = Field(
        None, description="CPU power estimate when no energy counter is readable."
    )
    idle_baseline_s: float = Field(
        0.0,
        ge=0,
        le=600,
        description="Before the first phase, sample the idle machine this long (phase `idle`), "
        "so energy views can subtract idle power; 0 = no idle baseline.",
    )


class BenchmarkSpec(StrictModel):
    """A whole benchmark: pipelines run collocated, optionally solo first, `repeats` times."""

    name: str = Field(..., pattern=STAGE_ID_PATTERN, description="Benchmark name.")
    seed: int = Field(0, ge=0, description="Drives arrival schedules, sample order, weights.")
    repeats: int = Field(1, ge=1, description="Independent trials.")
    collocation: CollocationSpec = Field(default_factory=CollocationSpec)
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec)
    pipelines: list[PipelineSpec] = Field(..., min_length=1, description="Pipelines to run.")
    nightly: bool = Field(
        False,
        # When a spec runs is not what it measures: left out of the normal form, so toggling it
        # keeps the spec hash (and comparisons with earlier runs) unchanged.
        exclude=True,
        description="Run this spec every night from Dagster's `nightly_benchmarks` schedule "
        "(cron `0 2 * * *` unless $COLLOBENCH_NIGHTLY_CRON says otherwise). Not part of the "
        "spec hash.",
    )

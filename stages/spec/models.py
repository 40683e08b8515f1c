"""Pydantic models of the benchmark spec YAML (the user contract: README.md#a-benchmark-spec).

Every model forbids unknown keys so a typo is an error, not a silently ignored setting.
Structural rules live here; rules that need the stage registry or the whole graph (unknown
stage types, edges, cycles) live in `stages.validation.checks`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from stages.collocation_modes import COLLOCATION_MODE_NAMES

# Re-exported (`X as X`): code imports every spec model from here.
from stages.spec.base import StrictModel as StrictModel
from stages.spec.loadgen import LoadgenSpec as LoadgenSpec
from stages.spec.loadgen import SingleStreamLoadgen
from stages.spec.services import ServiceSpec as ServiceSpec

STAGE_ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]*$"
MAX_STAGE_CONCURRENCY = 256

if TYPE_CHECKING:
    CollocationModeName = str
else:  # the registered modes' names, in their order: the schema's enum and the messages list them
    CollocationModeName = Literal[COLLOCATION_MODE_NAMES]


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
    scheduling_policy: Literal["other", "batch"] = Field(
        "other",
        description="Linux scheduling policy of the worker's threads: `other` (the default, "
        "SCHED_OTHER) or `batch` (SCHED_BATCH: a woken thread does not preempt the running one, "
        "so a hand-off between the pipeline's own threads costs fewer context switches). "
        "`batch` needs `cpus` that no other pipeline or started service runs on: on a shared "
        "core it would change what contention measures.",
    )

    @field_validator("cpus")
    @classmethod
    def _cpus_non_negative(cls, value: list[int] | None) -> list[int] | None:
        if value is not None:
            if not value:
                raise ValueError("cpus must list at least one core")
            if any(cpu < 0 for cpu in value):
                raise ValueError("cpu indices must be >= 0")
        return value

    @model_serializer(mode="wrap")
    def _omit_default_policy(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """Leave `scheduling_policy: other` out of the dump, so the normal form, and so the spec
        hash, of every spec written before the field existed is unchanged."""
        data: dict[str, object] = handler(self)
        if data.get("scheduling_policy") == "other":
            data.pop("scheduling_policy")
        return data


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
    concurrency: int = Field(
        1,
        ge=1,
        le=MAX_STAGE_CONCURRENCY,
        description="Threads that share the stage's input queue, each with its own stage "
        "instance (one shared instance for a stage type that declares itself thread-safe); "
        "an asynchronous stage type runs one event loop per thread. More than 1 needs "
        "input_policy `any`.",
    )
    fuse: bool = Field(
        False,
        description="Run this stage in the thread of the stage before it, right after it, for "
        "every query: no queue and no thread hand-off between them, recorded exactly as "
        "before (a stage row each). Gives up pipelining across the pair. Needs a linear link: "
        "this stage's only input is a stage whose only output is this one, both synchronous, "
        "concurrency 1, not on a cycle.",
    )

    @model_validator(mode="after")
    def _concurrency_needs_one_queue(self) -> StageSpec:
        if self.concurrency > 1 and self.input_policy != "any":
            raise ValueError(
                f"concurrency {self.concurrency} needs input_policy 'any' (a {self.input_policy} "
                "input is served by one thread)"
            )
        return self

    @model_serializer(mode="wrap")
    def _omit_new_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """Leave `concurrency: 1` and `fuse: false` out of the dump: the normal form, and so
        the spec hash, of every spec written before the fields existed is unchanged."""
        data: dict[str, object] = handler(self)
        if data.get("concurrency") == 1:
            data.pop("concurrency")
        if data.get("fuse") is False:
            data.pop("fuse")
        return data


class PipelineSpec(StrictModel):
    """One ML pipeline: a stage graph driven by its own load generator, in its own process."""

    name: str = Field(..., pattern=STAGE_ID_PATTERN, description="Unique pipeline name.")
    device: str = Field("cpu", pattern=r"^(cpu|cuda(:[0-9]+)?)$", description="cpu | cuda | cuda:N")
    placement: PlacementSpec = Field(default_factory=PlacementSpec)
    loadgen: LoadgenSpec = Field(default_factory=SingleStreamLoadgen)
    error_budget: int | None = Field(
        100,
        ge=1,
        description="Stop the pipeline (status failed) after this many failed queries; "
        "null = never.",
    )
    stages: list[StageSpec] = Field(..., min_length=1, description="The stage graph.")
    fuse: bool = Field(
        False,
        description="Fuse every linear link of the graph (as `fuse: true` on each stage that "
        "can be fused; the others keep their threads): each linear chain of stages runs in one "
        "thread, giving up pipelining along it.",
    )

    @model_serializer(mode="wrap")
    def _omit_default_fuse(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """Leave `fuse: false` out of the dump, so the spec hash of every spec written before
        the field existed is unchanged."""
        data: dict[str, object] = handler(self)
        if data.get("fuse") is False:
            data.pop("fuse")
        return data


class CollocationSpec(StrictModel):
    """How the pipelines share the device, and whether solo baselines are measured."""

    mode: CollocationModeName = Field("time_slice", description="Device sharing mechanism.")
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


class CalibrationSpec(StrictModel):
    """The reference workload run before and after every phase, outside its load window
    (stages.telemetry.calibration; rows in the run directory's `calibration` table)."""

    enabled: bool = Field(
        True,
        description="Measure each pipeline's cores (a fixed CPU loop; a GEMM and a device copy "
        "too on a cuda device) before and after every phase: the machine's speed, for "
        "comparing runs.",
    )
    chunk_ms: float = Field(
        25.0, ge=1, le=1000, description="Length of one chunk; the score is the chunks' median."
    )
    duration_ms: float = Field(
        100.0,
        ge=1,
        le=10_000,
        description="Time per workload, per pipeline with cores (or a GPU) of its own, per "
        "boundary (a GPU calibration adds seconds: a subprocess imports torch). Four chunks: "
        "a longer calibration does not average out a host's slow spells of about a second, "
        "and every phase pays it twice.",
    )

    @model_validator(mode="after")
    def _at_least_one_chunk(self) -> CalibrationSpec:
        if self.duration_ms < self.chunk_ms:
            raise ValueError("duration_ms must be at least chunk_ms (one chunk)")
        return self


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
    calibration: CalibrationSpec = Field(
        default_factory=CalibrationSpec,
        description="Machine speed measured before and after every phase. Left out of the "
        "spec hash while it has its defaults.",
    )

    @model_serializer(mode="wrap")
    def _omit_default_calibration(
        self, handler: SerializerFunctionWrapHandler
    ) -> dict[str, object]:
        """Leave the default `calibration` out of the dump, so the spec hash of every spec
        written before it existed is unchanged (`compare` matches hashes)."""
        data: dict[str, object] = handler(self)
        if self.calibration == CalibrationSpec():
            data.pop("calibration", None)
        return data


class BenchmarkSpec(StrictModel):
    """A whole benchmark: pipelines run collocated, optionally solo first, `repeats` times."""

    name: str = Field(..., pattern=STAGE_ID_PATTERN, description="Benchmark name.")
    seed: int = Field(0, ge=0, description="Drives arrival schedules, sample order, weights.")
    repeats: int = Field(1, ge=1, description="Independent trials.")
    collocation: CollocationSpec = Field(default_factory=CollocationSpec)
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec)
    pipelines: list[PipelineSpec] = Field(..., min_length=1, description="Pipelines to run.")
    services: list[ServiceSpec] = Field(
        default_factory=list,
        description="Servers the benchmark starts before the first phase and stops at the end "
        "(or, `external`, only uses); stages name them by `name`.",
    )
    nightly: bool = Field(
        False,
        # When a spec runs is not what it measures: left out of the normal form, so toggling it
        # keeps the spec hash (and comparisons with earlier runs) unchanged.
        exclude=True,
        description="Run this spec every night from Dagster's `nightly_benchmarks` schedule "
        "(cron `0 2 * * *` unless $COLLOBENCH_NIGHTLY_CRON says otherwise). Not part of the "
        "spec hash.",
    )

    @model_serializer(mode="wrap")
    def _omit_no_services(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """Leave an empty `services` out of the dump, so the spec hash of every spec written
        before services existed is unchanged."""
        data: dict[str, object] = handler(self)
        if data.get("services") == []:
            data.pop("services")
        return data

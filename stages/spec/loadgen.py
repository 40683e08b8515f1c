"""The `loadgen` block of a pipeline: one config model per load generator type, as a pydantic
union discriminated by `type`, so a type's required fields are required and typed.

Every type accepts the fields of the others (ignored where they do not apply), as the single
flat model before it did: a spec-wide override such as `--set pipelines.0.loadgen.rate=50`
stays valid on a closed-loop pipeline, and the normal form, so the spec hash, of every
existing spec is unchanged. The runtime maps each model to its scenario and arrival process
in `stages.runtime.loadgen.kinds`.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    field_validator,
    model_serializer,
    model_validator,
)

from stages.spec.base import StrictModel

DEFAULT_LOADGEN_TYPE: Final = "single_stream"
"""The type of a `loadgen` block that names none."""

_OMITTED_WHEN_UNSET: Final = (
    "ttft_slo_ms",
    "tpot_slo_ms",
    "trace_format",
    "trace_columns",
    "trace_time_scale",
    "trace_start_s",
    "trace_duration_s",
)
"""Optional fields left out of the normal form when unset (spec hashes unchanged)."""
TraceFormatName = Literal["offsets", "mooncake", "azure", "burstgpt"]


class TraceColumns(StrictModel):
    """Which column of a trace file holds what (None: the format's own name for it)."""

    offset: str | None = Field(None, description="The arrival time column.")
    offset_unit: Literal["ms", "s"] | None = Field(
        None, description="The unit of a numeric arrival time column (ms or s)."
    )
    samples: str | None = Field(None, description="Samples the query carries.")
    input_tokens: str | None = Field(None, description="The request's input token count.")
    output_tokens: str | None = Field(None, description="The request's output token count.")
    hash_ids: str | None = Field(
        None,
        description="Mooncake's prefix block ids (a list; JSON text in a CSV): requests "
        "sharing an id share that block of their prompt.",
    )


class LoadgenBase(StrictModel):
    """Fields every load generator type shares: the load window and its end conditions."""

    type: str = Field(description="The load generator type; each type's model narrows it.")
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
        0.0,
        ge=0,
        description="Closed loop (closed_loop, single_stream, multi_stream): pause between a "
        "completion and the client's next query.",
    )
    trace: str | None = Field(
        None,
        description="trace: CSV or Parquet file with column `offset_ms` (and optional `samples`).",
    )
    trace_format: TraceFormatName | None = Field(
        None,
        description="trace: the file's format: offsets (the default: CSV or Parquet with "
        "offset_ms, samples, input_tokens, output_tokens, hash_ids), mooncake (JSON lines: "
        "timestamp ms, input_length, output_length, hash_ids), azure (CSV: TIMESTAMP, "
        "ContextTokens, GeneratedTokens), burstgpt (CSV: Timestamp s, Request tokens, "
        "Response tokens).",
    )
    trace_columns: TraceColumns | None = Field(
        None, description="trace: column names that differ from the format's."
    )
    trace_time_scale: float | None = Field(
        None,
        gt=0,
        description="trace: offsets multiplied by this (0.5 replays twice as fast); default 1.",
    )
    trace_start_s: float | None = Field(
        None, ge=0, description="trace: replay from this second of the trace (trace time)."
    )
    trace_duration_s: float | None = Field(
        None, gt=0, description="trace: replay this many seconds of the trace (trace time)."
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
    ttft_slo_ms: float | None = Field(
        None,
        gt=0,
        description="Token SLO of a generating pipeline: time to first token (first token's "
        "arrival - the query's scheduled arrival) a query must meet to count as good in "
        "`token_goodput`; null = no TTFT bound.",
    )
    tpot_slo_ms: float | None = Field(
        None,
        gt=0,
        description="Token SLO of a generating pipeline: time per output token after the "
        "first ((finished - first token) / (tokens - 1)) a query must meet to count as good in "
        "`token_goodput`; null = no TPOT bound.",
    )

    @model_serializer(mode="wrap")
    def _omit_unset_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave unset token SLOs and trace options out of the dump: the normal form, and so
        the spec hash, of every spec written before the fields existed is unchanged."""
        data: dict[str, Any] = handler(self)
        for name in _OMITTED_WHEN_UNSET:
            if data.get(name) is None:
                data.pop(name, None)
        return data

    @model_validator(mode="after")
    def _window_is_consistent(self) -> LoadgenBase:
        if self.max_queries is not None and self.max_queries < self.min_queries:
            raise ValueError("max_queries must be at least min_queries")
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


class SamplesPerQuery(LoadgenBase):
    """Types whose every query carries the same number of samples."""

    samples_per_query: int = Field(
        1,
        ge=1,
        description="Samples each query carries (multi_stream, server, constant; trace: for "
        "rows without `samples`). closed_loop and single_stream issue one-sample queries.",
    )


class ServerLoadgen(SamplesPerQuery):
    """MLPerf Server: open loop, gamma (by default Poisson) inter-arrival times at `rate`."""

    type: Literal["server", "poisson"] = Field(
        description="Open loop at `rate` queries/s; `poisson` is an alias of `server`."
    )
    rate: float = Field(..., gt=0, description="Target arrival rate in queries/s.")

    @field_validator("type")
    @classmethod
    def _canonical_type(cls, value: str) -> str:
        return "server"


class ConstantLoadgen(SamplesPerQuery):
    """Open loop with a fixed gap of 1/rate between queries, the first at time zero."""

    type: Literal["constant"] = Field(description="Open loop, one query every 1/rate s.")
    rate: float = Field(..., gt=0, description="Arrival rate in queries/s.")


class TraceLoadgen(SamplesPerQuery):
    """Open loop replaying the arrival offsets of a trace file."""

    type: Literal["trace"] = Field(description="Open loop, arrivals replayed from `trace`.")
    trace: str = Field(
        ...,
        min_length=1,
        description="CSV or Parquet file with column `offset_ms` (and optional `samples`).",
    )


class ClosedLoopLoadgen(SamplesPerQuery):
    """Closed loop: `concurrency` clients, each issuing its next query when its last ends."""

    type: Literal["closed_loop"] = Field(description="Closed loop with `concurrency` clients.")


class SingleStreamLoadgen(SamplesPerQuery):
    """MLPerf SingleStream: one client, one-sample queries, the next when the last ends."""

    type: Literal["single_stream"] = Field(
        DEFAULT_LOADGEN_TYPE, description="One client issuing one query at a time (default)."
    )


class MultiStreamLoadgen(SamplesPerQuery):
    """MLPerf MultiStream: one client, `samples_per_query` samples a query."""

    type: Literal["multi_stream"] = Field(
        description="One client issuing one query of `samples_per_query` samples at a time."
    )


class OfflineLoadgen(LoadgenBase):
    """MLPerf Offline: every sample handed over at once (after the warm-up), as one-sample
    queries; throughput is the figure."""

    # The YAML key stays `samples_per_query` (MLPerf Offline's one query of N samples), the
    # name in code says what the harness does with it.
    model_config = ConfigDict(
        validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )

    type: Literal["offline"] = Field(description="Everything issued at once.")
    total_samples: int = Field(
        1,
        ge=1,
        alias="samples_per_query",
        description="offline: total samples issued at once, one query each (at most "
        "`max_queries`).",
    )

    @model_validator(mode="after")
    def _needs_its_sample_count(self) -> OfflineLoadgen:
        if self.total_samples == 1 and self.max_queries is None:
            raise ValueError(
                "offline issues `samples_per_query` samples at once: set it (e.g. 10000)"
            )
        if self.warmup_s > 0:
            raise ValueError(
                "offline issues everything at time zero, so warmup_s would flag it all; "
                "use warmup_queries"
            )
        return self


def _default_type(value: Any) -> Any:
    """A `loadgen` mapping without `type` is single_stream."""
    if isinstance(value, dict) and "type" not in value:
        return {"type": DEFAULT_LOADGEN_TYPE, **value}
    return value


LoadgenSpec = Annotated[
    OfflineLoadgen
    | SingleStreamLoadgen
    | MultiStreamLoadgen
    | ServerLoadgen
    | ConstantLoadgen
    | ClosedLoopLoadgen
    | TraceLoadgen,
    Field(discriminator="type"),
    BeforeValidator(_default_type),
]
"""How queries arrive at a pipeline and when its load window ends: the config model its
`type` names."""

_ADAPTER: TypeAdapter[LoadgenSpec] = TypeAdapter(LoadgenSpec)


def loadgen_spec(**fields: Any) -> LoadgenSpec:
    """Validate `fields` into the config model their `type` names (single_stream if none)."""
    return _ADAPTER.validate_python(fields)

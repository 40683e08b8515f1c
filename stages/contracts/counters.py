"""A pipeline's query counters, defined once: the snapshot the runtime takes, the worker sends
to the launcher, the launcher keeps in each outcome and the manifest writes (flat, in each row
of `results`), which MLflow and the report read back."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# The per-status query counts, in the order reports show them; `errors` and `timeouts` are also
# the warehouse's spelling (analysis/sql/views/16_pipeline_outcomes.sql).
QUERY_COUNTS = ("ok", "errors", "dropped", "timeouts")


class QueryCounters(BaseModel):
    """One pipeline's counters at one instant (live during the load window, final after it).
    The defaults are a pipeline's before its worker first reported (nothing issued, no times).
    Unknown fields are refused, so a counter renamed on one side fails instead of reading 0."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    issued: int = Field(0, description="Queries issued, warm-up included (the worker's count).")
    ok: int = 0
    errors: int = 0
    dropped: int = 0
    timeouts: int = 0
    samples_ok: int = 0
    first_issue_ns: int | None = Field(None, description="Monotonic clock; None: not reported.")
    last_completed_ns: int | None = Field(None, description="Monotonic clock; None: not reported.")
    measured: int = Field(
        0, description="Non-warm-up queries recorded, failures included (the worker's count)."
    )
    measured_over_slo: int = Field(
        0, description="Of those, the ones over the pipeline's slo_ms or not ok."
    )
    inflight: int = Field(0, description="Issued queries not yet finished at the last report.")
    live_p99_ms: float | None = Field(
        None, description="Progress display only: p99 of the last 2,000 completions."
    )

"""The columns of every run-directory table, as Arrow schemas: the one statement of each table's
shape. Derived from it: the table list (`TABLES`), the recorder's row tuples
(stages.runtime.recorder), the warehouse's raw-table views
(analysis.warehouse.registered_files.shapes); and checked against it: the column tables of
docs/contracts.md#the-run-directory (tests/rundir/test_ddl_matches_schemas.py)."""

from __future__ import annotations

import pyarrow as pa

# Columns every row carries. Host-wide and device-wide samples have pipeline = NULL.
_KEY_FIELDS = [
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("trial", pa.int32(), nullable=False),
    pa.field("phase", pa.string(), nullable=False),
    pa.field("pipeline", pa.string()),
]

SCHEMAS: dict[str, pa.Schema] = {
    "queries": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("query_id", pa.int64(), nullable=False),
            pa.field("scheduled_ns", pa.int64(), nullable=False),
            pa.field("issued_ns", pa.int64()),  # for dropped queries: when the issue was refused
            pa.field("completed_ns", pa.int64()),  # NULL unless the query ended (ok or error)
            # ok | error | dropped | timeout | not_issued (due in the window, load stopped first)
            pa.field("status", pa.string(), nullable=False),
            pa.field("samples", pa.int32(), nullable=False),
            pa.field("warmup", pa.bool_(), nullable=False),
        ]
    ),
    "stage_events": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("query_id", pa.int64(), nullable=False),
            pa.field("stage", pa.string(), nullable=False),
            pa.field("visit", pa.int32(), nullable=False),
            # at a join: when the first branch arrived (join wait = joined_ns - enqueued_ns)
            pa.field("enqueued_ns", pa.int64(), nullable=False),
            pa.field("started_ns", pa.int64(), nullable=False),
            pa.field("finished_ns", pa.int64(), nullable=False),
            pa.field("status", pa.string(), nullable=False),  # ok | error
            pa.field("first_token_ns", pa.int64()),  # generation stages only
            pa.field("tokens", pa.int32()),
            pa.field("joined_ns", pa.int64()),  # join stages: when every branch had arrived
            # stages that know the right answers: samples graded, samples answered right
            pa.field("graded", pa.int32()),
            pa.field("correct", pa.int32()),
            pa.field("loss", pa.float64()),  # training stages: the step's loss
            # served models (http.openai): input tokens as the server counted them (usage)
            pa.field("prompt_tokens", pa.int32()),
        ]
    ),
    "errors": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("stage", pa.string(), nullable=False),
            pa.field("first_query_id", pa.int64(), nullable=False),
            pa.field("count", pa.int64(), nullable=False),
            pa.field("error", pa.string(), nullable=False),  # one row per distinct error text
        ]
    ),
    "host_samples": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("ts_ns", pa.int64(), nullable=False),
            # host | process (a pipeline's worker) | service (a server of the spec, pipeline =
            # its name) | harness (launcher, samplers)
            pa.field("scope", pa.string(), nullable=False),
            pa.field("pid", pa.int64()),
            pa.field("cpu_util", pa.float64()),  # percent of one core (process) / all cores (host)
            pa.field("rss_mib", pa.float64()),
            pa.field("energy_j", pa.float64()),  # cumulative since sampler start (host rows)
            pa.field("energy_source", pa.string()),  # rapl | model_estimate | NULL
        ]
    ),
    "gpu_samples": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("ts_ns", pa.int64(), nullable=False),
            pa.field("gpu", pa.int32(), nullable=False),
            pa.field("uuid", pa.string()),
            pa.field("power_w", pa.float64()),
            pa.field("energy_j", pa.float64()),  # cumulative since sampler start, resets repaired
            pa.field("energy_source", pa.string()),  # nvml_counter | nvml_power
            pa.field("sm_util", pa.float64()),
            pa.field("mem_util", pa.float64()),
            pa.field("mem_used_mib", pa.float64()),
            pa.field("sm_clock_mhz", pa.float64()),
            pa.field("temp_c", pa.float64()),
            pa.field("throttle_reasons", pa.int64()),
        ]
    ),
    "gpu_process_samples": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("ts_ns", pa.int64(), nullable=False),
            pa.field("gpu", pa.int32(), nullable=False),
            pa.field("pid", pa.int64(), nullable=False),
            pa.field("sm_util", pa.float64()),
            pa.field("mem_util", pa.float64()),
            pa.field("mem_used_mib", pa.float64()),
        ]
    ),
    # A service's Prometheus endpoint (`services[].metrics`), scraped every period of each
    # phase by a sampler process (pipeline NULL): one row per exposed sample, histogram buckets
    # only with `buckets: true`, plus `up` (1 ok, 0 failed: its error in labels) and
    # `scrape_duration_seconds` per scrape. A failed scrape has only its `up` 0 row.
    "server_samples": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("ts_ns", pa.int64(), nullable=False),  # when the scrape started
            pa.field("service", pa.string(), nullable=False),
            pa.field("metric", pa.string(), nullable=False),  # as exposed: vllm:..._total
            pa.field("labels", pa.string(), nullable=False),  # JSON object, keys sorted
            pa.field("value", pa.float64()),  # NULL for NaN
        ]
    ),
    # Operator profiling (`profile_every` of model stages): one row per profiler event of a
    # sampled query's model call, plus one `window` row per profiled query (the profiler's own
    # span), so the set of profiled (query_id, stage, visit) is known even without events.
    "operator_spans": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("query_id", pa.int64(), nullable=False),
            pa.field("stage", pa.string(), nullable=False),
            pa.field("visit", pa.int32(), nullable=False),
            pa.field("operator", pa.string(), nullable=False),  # aten::conv2d, a kernel name...
            pa.field("start_ns", pa.int64(), nullable=False),  # monotonic clock, like the rest
            pa.field("end_ns", pa.int64(), nullable=False),
            pa.field("device_type", pa.string(), nullable=False),  # cpu | cuda | window
            pa.field("device_index", pa.int32()),
            pa.field("thread_id", pa.int64()),  # torch's thread id (CPU), stream (CUDA)
            pa.field("self_cpu_ns", pa.int64()),  # CPU time minus child operators (CPU ops)
            pa.field("total_cpu_ns", pa.int64()),  # CPU time with child operators (CPU ops)
            pa.field("input_shapes", pa.string()),  # JSON, only with record_shapes
        ]
    ),
    # Streamed tokens (`http.openai` with `stream: true`): one row per token chunk's arrival at
    # the client, on the run's monotonic clock; token_index 0 is the first token (its ts_ns is
    # the visit's first_token_ns). Inter-token latency = the gap between consecutive indexes.
    "token_events": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("query_id", pa.int64(), nullable=False),
            pa.field("stage", pa.string(), nullable=False),
            pa.field("visit", pa.int32(), nullable=False),
            pa.field("token_index", pa.int32(), nullable=False),
            pa.field("ts_ns", pa.int64(), nullable=False),
        ]
    ),
    # Multi-turn sessions (`http.openai` given a payload's `turns`): one row per turn of a
    # session visit: when its request was sent, its first token and its end, on the run's
    # monotonic clock, with the server's prompt and completion token counts.
    "session_turns": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("query_id", pa.int64(), nullable=False),
            pa.field("stage", pa.string(), nullable=False),
            pa.field("visit", pa.int32(), nullable=False),
            pa.field("turn", pa.int32(), nullable=False),  # 0 = the session's first
            pa.field("sent_ns", pa.int64(), nullable=False),
            pa.field("first_token_ns", pa.int64()),
            pa.field("finished_ns", pa.int64(), nullable=False),
            pa.field("prompt_tokens", pa.int32()),  # the server's: the history so far
            pa.field("tokens", pa.int32()),  # the turn's answer
        ]
    ),
    # Machine speed (stages.telemetry.calibration): a fixed reference workload before and after
    # every phase, outside its load window, on each pipeline's cores (pipeline = whose cores or
    # GPU were measured; pipelines sharing the same cores share one measurement).
    "calibration": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("position", pa.string(), nullable=False),  # before | after
            pa.field("workload", pa.string(), nullable=False),  # cpu_loop | gpu_gemm | gpu_copy
            pa.field("score", pa.float64(), nullable=False),  # higher = faster
            pa.field("unit", pa.string(), nullable=False),  # kloops_per_s | tflop_per_s | gb_per_s
            pa.field("start_ns", pa.int64(), nullable=False),  # monotonic clock, like the rest
            pa.field("end_ns", pa.int64(), nullable=False),
        ]
    ),
}

TABLES: tuple[str, ...] = tuple(SCHEMAS)
"""The run directory's tables, in the order they are merged and loaded; `<table>.parquet` once
merged (stages.rundir.layout.merged_file)."""
KEY_COLUMNS: tuple[str, ...] = tuple(field.name for field in _KEY_FIELDS)
"""The columns every table starts with; a writer adds them from its keys (ChunkWriter)."""
STAGE_WRITTEN_TABLES = frozenset({"operator_spans", "token_events", "session_turns"})
"""The tables a stage writes itself (`StageContext.write_rows`, through the recorder's writer
thread); the others have one writer each: the recorder (queries, stage_events, errors), the
samplers and the launcher (calibration)."""

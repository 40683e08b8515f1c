-- The raw tables' shapes: the columns and types of the run directory's Parquet tables, as the
-- warehouse shows them (see the run-directory contract in docs/contracts.md#the-run-directory).
-- The warehouse does not hold these rows: each name below is a VIEW over the Parquet files of
-- every loaded run (registered in `run_files`), which analysis/catalogue.py generates from
-- these shapes (a column a file lacks reads as NULL). These statements only ever run in a
-- throwaway in-memory database, to learn the shapes.
-- Every fact row carries run_id, trial, phase (solo | collocated) and pipeline (NULL for
-- host-wide and device-wide samples). Times are integer nanoseconds of the host's monotonic
-- clock; the manifest maps that clock to wall time once.

-- One row per query a load generator scheduled. Latency counts from scheduled_ns (never from
-- issue), so coordinated omission cannot hide a backlog. Warm-up queries are kept, flagged.
CREATE TABLE IF NOT EXISTS queries (
    run_id VARCHAR NOT NULL,
    trial INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    pipeline VARCHAR,
    query_id BIGINT NOT NULL,       -- unique within (run_id, trial, phase, pipeline)
    scheduled_ns BIGINT NOT NULL,   -- the arrival time the schedule asked for
    issued_ns BIGINT,               -- for dropped queries: when the issue was refused
    completed_ns BIGINT,            -- NULL unless the query ended (ok or error)
    status VARCHAR NOT NULL,        -- ok | error | dropped | timeout | not_issued
    samples INTEGER NOT NULL,       -- samples the query carries
    warmup BOOLEAN NOT NULL         -- issued during warm-up: excluded from results
);

-- One row per stage visit of a query (a query may visit a stage several times on a cycle).
CREATE TABLE IF NOT EXISTS stage_events (
    run_id VARCHAR NOT NULL,
    trial INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    pipeline VARCHAR,
    query_id BIGINT NOT NULL,
    stage VARCHAR NOT NULL,
    visit INTEGER NOT NULL,
    enqueued_ns BIGINT NOT NULL,    -- put on the stage's input queue (join: first branch's arrival)
    started_ns BIGINT NOT NULL,     -- taken off it by the stage thread
    finished_ns BIGINT NOT NULL,
    status VARCHAR NOT NULL,        -- ok | error
    first_token_ns BIGINT,          -- generation stages only
    tokens INTEGER,
    joined_ns BIGINT,               -- join stages: when every branch had arrived (merged)
    graded INTEGER,                 -- stages that know the right answers: samples graded
    correct INTEGER,                --   and samples answered right (accuracy = correct / graded)
    loss DOUBLE,                    -- training stages: the step's loss
    prompt_tokens INTEGER           -- served models (http.openai): input tokens as the server
                                    -- counted them (its usage.prompt_tokens)
);

-- Each distinct stage error once per (run, trial, phase, pipeline, stage), with its count.
CREATE TABLE IF NOT EXISTS errors (
    run_id VARCHAR NOT NULL,
    trial INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    pipeline VARCHAR,
    stage VARCHAR NOT NULL,
    first_query_id BIGINT NOT NULL,
    "count" BIGINT NOT NULL,
    error VARCHAR NOT NULL
);

-- Host sampler rows: scope 'host' (pipeline NULL, host-wide CPU and energy), scope 'process'
-- (one pipeline's worker process), scope 'service' (a server of the spec's `services:` and its
-- descendants; pipeline = the service's name) and scope 'harness'. energy_j is cumulative since the sampler started; one sampler
-- runs per (trial, phase) and, in the solo phase, per solo baseline.
CREATE TABLE IF NOT EXISTS host_samples (
    run_id VARCHAR NOT NULL,
    trial INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    pipeline VARCHAR,
    ts_ns BIGINT NOT NULL,
    scope VARCHAR NOT NULL,         -- host | process (a pipeline) | service | harness
    pid BIGINT,
    cpu_util DOUBLE,                -- percent of one core (process) / of all cores (host)
    rss_mib DOUBLE,
    energy_j DOUBLE,                -- cumulative since sampler start (host rows)
    energy_source VARCHAR           -- rapl | model_estimate | NULL (no energy measured)
);

-- GPU sampler rows, one per device and tick (pipeline NULL: a device is shared).
CREATE TABLE IF NOT EXISTS gpu_samples (
    run_id VARCHAR NOT NULL,
    trial INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    pipeline VARCHAR,
    ts_ns BIGINT NOT NULL,
    gpu INTEGER NOT NULL,
    uuid VARCHAR,
    power_w DOUBLE,
    energy_j DOUBLE,                -- cumulative since sampler start, counter resets repaired
    energy_source VARCHAR,          -- nvml_counter | nvml_power | NULL
    sm_util DOUBLE,
    mem_util DOUBLE,
    mem_used_mib DOUBLE,
    sm_clock_mhz DOUBLE,
    temp_c DOUBLE,
    throttle_reasons BIGINT
);

-- Per-process GPU use, so a device's energy can later be split between pipelines and services
-- (pipeline: the pipeline or service whose process or descendant the pid is; NULL: foreign).
CREATE TABLE IF NOT EXISTS gpu_process_samples (
    run_id VARCHAR NOT NULL,
    trial INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    pipeline VARCHAR,
    ts_ns BIGINT NOT NULL,
    gpu INTEGER NOT NULL,
    pid BIGINT NOT NULL,
    sm_util DOUBLE,
    mem_util DOUBLE,
    mem_used_mib DOUBLE
);

-- A service's Prometheus endpoint (`services[].metrics`), scraped every `period_ms` of each
-- phase by a sampler process outside the workers (pipeline NULL). One row per exposed sample
-- (the series name as exposed: `vllm:prefix_cache_hits_total`; histogram `_bucket` series only
-- with `buckets: true`), plus per scrape `up` (1: it worked; 0: it failed, the error in labels,
-- and no other row: a gap) and `scrape_duration_seconds`. View `server_metrics` maps the names.
CREATE TABLE IF NOT EXISTS server_samples (
    run_id VARCHAR NOT NULL,
    trial INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    pipeline VARCHAR,
    ts_ns BIGINT NOT NULL,          -- when the scrape started (monotonic clock)
    service VARCHAR NOT NULL,       -- the spec's service name
    metric VARCHAR NOT NULL,        -- as exposed, e.g. vllm:num_requests_running
    labels VARCHAR NOT NULL,        -- JSON object of the sample's labels, keys sorted
    value DOUBLE                    -- NULL for NaN
);

-- Operator profiling (model stages with profile_every = N): one row per torch.profiler event of
-- every Nth query's model call, and one row per profiled query with device_type 'window' (the
-- profiler's whole window, operator '[profiler window]'), which marks the (query_id, stage,
-- visit) as profiled. Times are on the same monotonic clock as stage_events; a span lies
-- inside its stage visit's [started_ns, finished_ns]. Empty unless a stage profiled.
CREATE TABLE IF NOT EXISTS operator_spans (
    run_id VARCHAR NOT NULL,
    trial INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    pipeline VARCHAR,
    query_id BIGINT NOT NULL,
    stage VARCHAR NOT NULL,
    visit INTEGER NOT NULL,
    operator VARCHAR NOT NULL,      -- aten::conv2d, a CUDA kernel's name, cudaLaunchKernel...
    start_ns BIGINT NOT NULL,
    end_ns BIGINT NOT NULL,
    device_type VARCHAR NOT NULL,   -- cpu (operators, runtime calls) | cuda (kernels, copies) | window
    device_index INTEGER,           -- device events only
    thread_id BIGINT,               -- torch's id of the calling thread (cpu); the stream (cuda)
    self_cpu_ns BIGINT,             -- cpu rows: CPU time minus child operators
    total_cpu_ns BIGINT,            -- cpu rows: CPU time including child operators
    input_shapes VARCHAR            -- JSON list of input shapes, when the stage records them
);

-- Streamed tokens (`http.openai` stages with stream: true): one row per token chunk's arrival
-- at the client, on the same monotonic clock as stage_events. token_index 0 is the first token
-- (its ts_ns equals the visit's first_token_ns); the gap between consecutive token_index values
-- of one (run_id, trial, phase, pipeline, query_id, stage, visit) is an inter-token latency.
-- Empty unless a stage streamed.
CREATE TABLE IF NOT EXISTS token_events (
    run_id VARCHAR NOT NULL,
    trial INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    pipeline VARCHAR,
    query_id BIGINT NOT NULL,
    stage VARCHAR NOT NULL,
    visit INTEGER NOT NULL,
    token_index INTEGER NOT NULL,   -- 0 = the first token of the visit
    ts_ns BIGINT NOT NULL           -- when the client read it (monotonic clock)
);

-- Multi-turn sessions (`http.openai` given a payload's `turns`): one row per turn of a
-- session visit. TTFT of a turn = first_token_ns - sent_ns; prompt_tokens (the server's) counts
-- the whole history the turn carried. View `sessions` sums them up per turn. Empty unless a
-- stage ran sessions.
CREATE TABLE IF NOT EXISTS session_turns (
    run_id VARCHAR NOT NULL,
    trial INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    pipeline VARCHAR,
    query_id BIGINT NOT NULL,
    stage VARCHAR NOT NULL,
    visit INTEGER NOT NULL,
    turn INTEGER NOT NULL,          -- 0 = the session's first turn
    sent_ns BIGINT NOT NULL,        -- the turn's request sent (monotonic clock)
    first_token_ns BIGINT,          -- its first content chunk read
    finished_ns BIGINT NOT NULL,    -- its answer complete
    prompt_tokens INTEGER,          -- the server's usage.prompt_tokens: the history so far
    tokens INTEGER                  -- the turn's answer, in the server's tokens
);

-- Machine speed (stages.telemetry.calibration): a short fixed reference workload before and
-- after every phase, outside its load window, on each pipeline's cores (the pipeline's
-- placement cpus, else every core the launcher may use) and, for a cuda pipeline, its GPU.
-- Higher is faster: the median over short chunks of the work per second. Pipelines that share
-- the same cores (or GPU) share one measurement (the same score and times). Empty for runs from
-- before it existed or with telemetry.calibration.enabled false; a calibration that failed has
-- no row (a warning of code calibration_failed instead).
CREATE TABLE IF NOT EXISTS calibration (
    run_id VARCHAR NOT NULL,
    trial INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    pipeline VARCHAR,               -- whose cores (or GPU) were measured
    position VARCHAR NOT NULL,      -- before | after (the phase)
    workload VARCHAR NOT NULL,      -- cpu_loop | gpu_gemm | gpu_copy
    score DOUBLE NOT NULL,          -- higher = faster
    unit VARCHAR NOT NULL,          -- kloops_per_s | tflop_per_s | gb_per_s
    start_ns BIGINT NOT NULL,       -- monotonic clock, like every table
    end_ns BIGINT NOT NULL
);

-- FROZEN TEST FIXTURE: the warehouse schema of version 1 (analysis/sql/schema.sql as of the
-- commit before issue 9, a28fd73^), which has no schema_info table. Never edit it: the migration
-- tests build an old warehouse from it and check that loading upgrades it.
-- collobench warehouse schema: one row per run in `runs`, and the run directory's Parquet tables
-- mirrored column for column (see the run-directory contract in docs/contracts.md#the-run-directory).
-- Every fact row carries run_id, trial, phase (solo | collocated) and pipeline (NULL for
-- host-wide and device-wide samples). Times are integer nanoseconds of the host's monotonic
-- clock; the manifest maps that clock to wall time once.
-- Loading is idempotent: the loader deletes a run_id's rows from every table, then inserts them
-- again, in one transaction. The fact tables carry no primary keys on purpose (index upkeep would
-- slow bulk inserts, and uniqueness is the writer's contract, not the warehouse's).

-- One row per loaded run directory: identity and status from manifest.json, the whole manifest
-- kept as JSON text (spec, seeds, clock mapping, versions, per-pipeline outcomes, warnings).
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    name VARCHAR,
    spec_hash VARCHAR,          -- sha256 of the normalised spec
    status VARCHAR,             -- ok | failed | interrupted | running (cut short before the end)
    started_at TIMESTAMPTZ,
    ended_at TIMESTAMPTZ,       -- NULL when the run was cut short
    manifest JSON,              -- manifest.json verbatim
    run_dir VARCHAR,            -- where the run directory was when it was loaded
    loaded_at TIMESTAMPTZ NOT NULL
);

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
    joined_ns BIGINT                -- join stages: when every branch had arrived (merged)
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

-- Host sampler rows: scope 'host' (pipeline NULL, host-wide CPU and energy) and scope 'process'
-- (one pipeline's worker process). energy_j is cumulative since the sampler started; one sampler
-- runs per (trial, phase) and, in the solo phase, per solo baseline.
CREATE TABLE IF NOT EXISTS host_samples (
    run_id VARCHAR NOT NULL,
    trial INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    pipeline VARCHAR,
    ts_ns BIGINT NOT NULL,
    scope VARCHAR NOT NULL,         -- host | process (a pipeline) | harness (launcher, samplers)
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

-- Per-process GPU use, so a device's energy can later be split between pipelines.
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

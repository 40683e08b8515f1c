-- collobench warehouse schema: one row per run in `runs`, and the run directory's Parquet tables
-- mirrored column for column (see the run-directory contract in docs/contracts.md#the-run-directory).
-- Every fact row carries run_id, trial, phase (solo | collocated) and pipeline (NULL for
-- host-wide and device-wide samples). Times are integer nanoseconds of the host's monotonic
-- clock; the manifest maps that clock to wall time once.
-- Loading is idempotent: the loader deletes a run_id's rows from every table, then inserts them
-- again, in one transaction. The fact tables carry no primary keys on purpose (index upkeep would
-- slow bulk inserts, and uniqueness is the writer's contract, not the warehouse's).

-- The warehouse's schema version: one row per version it has been at, written when it was
-- created at that version or migrated to it (analysis/warehouse/migrations.py; the migrations are in
-- analysis/sql/migrations/NNN_*.sql, NNN the version each one reaches). Its latest version is
-- max(version). A warehouse without this table was written before versions were recorded:
-- version 1. Loading upgrades an older warehouse and refuses a newer one.
CREATE TABLE IF NOT EXISTS schema_info (
    version INTEGER NOT NULL,
    written_by VARCHAR,         -- the collobench version that created or migrated it
    migrated_at TIMESTAMPTZ NOT NULL
);

-- One row per loaded run directory: identity and status from manifest.json, the whole manifest
-- kept as JSON text (spec, seeds, clock mapping, versions, per-pipeline outcomes, warnings).
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    name VARCHAR,
    spec_hash VARCHAR,          -- sha256 of the normalised spec
    status VARCHAR,             -- ok | failed | interrupted | device_busy | running (cut short)
    started_at TIMESTAMPTZ,
    ended_at TIMESTAMPTZ,       -- NULL when the run was cut short
    manifest JSON,              -- manifest.json verbatim
    run_dir VARCHAR,            -- where the run directory was when it was loaded
    loaded_at TIMESTAMPTZ NOT NULL,
    host VARCHAR                -- the host id it ran on (manifest `host`, else the probe's
                                -- hostname; migration 005; last, as ALTER TABLE adds it)
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
    joined_ns BIGINT,               -- join stages: when every branch had arrived (merged)
    graded INTEGER,                 -- stages that know the right answers: samples graded
    correct INTEGER,                --   and samples answered right (accuracy = correct / graded)
    loss DOUBLE                     -- training stages: the step's loss
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

-- Capacity searches (`collobench capacity`, stages/capacity): one row per search directory
-- `<out>/<search_id>/`, from its search.json (what was asked) and capacity.json (the answer;
-- the answer's columns are NULL while a search is unfinished). Loaded by
-- analysis.capacity.load_search, idempotently: delete-then-insert by search_id in one
-- transaction, together with the search's rows in capacity_probes. Rates are offered queries
-- per second of the target pipeline; for a region ray (`ray` set, pipeline 'A+B') they are the
-- ray's scale s instead (pipeline i offered s * ray[i]).
CREATE TABLE IF NOT EXISTS capacity_searches (
    search_id VARCHAR PRIMARY KEY,
    pipeline VARCHAR NOT NULL,      -- the target pipeline ('A+B' for a region ray)
    slo_ms DOUBLE NOT NULL,         -- the latency objective
    percentile DOUBLE NOT NULL,     -- the percentile it bounds (0.99)
    precision DOUBLE,               -- stop when bracket_hi / bracket_lo <= 1 + precision
    max_probes INTEGER,             -- the probe budget, the ceiling probe included
    probe_s DOUBLE,                 -- each probe's measured window
    with_rates JSON,                -- capacity.json `with`: co-runner -> fixed offered rate (q/s)
    ray JSON,                       -- region rays only: pipeline -> its rate per unit of s
    base_seed INTEGER,              -- the first probe's seed
    min_rate DOUBLE,                -- below this the search calls the SLO infeasible
    spec_source VARCHAR,
    spec_hash VARCHAR,              -- sha256 of the normalised spec
    certified_qps DOUBLE,           -- the highest met rate below the lowest not-met one
    estimate_qps DOUBLE,            -- where the isotonic fit of over_slo/queries crosses 1 - p
    estimate_ci95_low DOUBLE,       -- estimate_ci95[0]
    estimate_ci95_high DOUBLE,      -- estimate_ci95[1]
    bracket_lo DOUBLE,              -- bracket[0] (the certified rate)
    bracket_hi DOUBLE,              -- bracket[1]; NULL when nothing above bracket_lo failed
    stop_reason VARCHAR,            -- converged | max_probes | infeasible | ceiling; NULL: running
    ceiling_qps DOUBLE,             -- the ceiling probe's throughput
    monotonicity_violations INTEGER, -- pairs of probes out of monotone order
    flagged_probes INTEGER,         -- probes undecided on two seeds
    probes INTEGER NOT NULL,        -- probes recorded (rows in capacity_probes)
    estimate_method VARCHAR,        -- how the estimate and its interval were computed
    complete BOOLEAN NOT NULL,      -- capacity.json was there (the search ended)
    search_dir VARCHAR NOT NULL,    -- where the search directory was when it was loaded
    loaded_at TIMESTAMPTZ NOT NULL
);

-- One row per probe of a search (capacity.json's `probes`, or probes.jsonl while the search is
-- unfinished): a run of the spec at one offered rate, or the closed-loop ceiling probe.
CREATE TABLE IF NOT EXISTS capacity_probes (
    search_id VARCHAR NOT NULL,
    probe_index INTEGER NOT NULL,   -- the probe's `index`: 0, 1, ... in the order they ran
    kind VARCHAR NOT NULL,          -- ceiling | search
    rate DOUBLE NOT NULL,           -- offered q/s of the target (a ray: the scale s)
    seed INTEGER NOT NULL,          -- the spec seed it ran with (a re-probe takes the next)
    queries BIGINT NOT NULL,        -- the target's measured queries, failures included
    over_slo BIGINT NOT NULL,       -- of them over the SLO, failures counted as over
    over_slo_share DOUBLE,          -- over_slo / queries; NULL when no query was measured
    verdict VARCHAR,                -- met | missed | undecided; NULL for the ceiling probe
    p99_ms DOUBLE,                  -- the target's p99 over every measured query
    abort_reason VARCHAR,           -- why the probe stopped early (it could no longer pass)
    run_dir VARCHAR,                -- the probe's run directory; NULL when simulated
    flagged BOOLEAN NOT NULL,       -- undecided on two seeds: counted as not met
    throughput_qps DOUBLE,          -- the target's completed ok queries per second
    duration_s DOUBLE,              -- wall time of the probe
    design_effect DOUBLE,           -- variance inflation from bursts the verdict divided by
    pipelines JSON                  -- every pipeline's figures in the probe, by name
);

-- One row per ray of a capacity region (`collobench capacity --region A,B`, region.json in
-- `<out>/<region_id>/`): along the ray, pipeline A is offered s * direction_a * solo_capacity_a
-- and B s * direction_b * solo_capacity_b (direction = (cos, sin) of angle_deg); s is the
-- ray's searched scale. Loaded by analysis.capacity.load_region, delete-then-insert by
-- region_id.
CREATE TABLE IF NOT EXISTS capacity_region_rays (
    region_id VARCHAR NOT NULL,
    ray_index INTEGER NOT NULL,     -- the ray's index k = 1..rays, from the A axis towards B
    angle_deg DOUBLE NOT NULL,      -- t = 90 k / (rays + 1); 0 would be A alone, 90 B alone
    pipeline_a VARCHAR NOT NULL,
    pipeline_b VARCHAR NOT NULL,
    direction_a DOUBLE NOT NULL,    -- cos(angle)
    direction_b DOUBLE NOT NULL,    -- sin(angle)
    solo_capacity_a_qps DOUBLE,     -- C_A: A's capacity alone (the normalising rate)
    solo_capacity_b_qps DOUBLE,     -- C_B
    certified_s DOUBLE,             -- the ray search's certified scale
    estimate_s DOUBLE,              -- its estimate
    estimate_ci95_low_s DOUBLE,
    estimate_ci95_high_s DOUBLE,
    bracket_lo_s DOUBLE,
    bracket_hi_s DOUBLE,
    stop_reason VARCHAR,
    probes INTEGER,                 -- probes the ray's search ran
    flagged_probes INTEGER,
    monotonicity_violations INTEGER,
    search_id VARCHAR,              -- the ray's search (capacity_searches.search_id)
    region_dir VARCHAR NOT NULL,
    loaded_at TIMESTAMPTZ NOT NULL
);

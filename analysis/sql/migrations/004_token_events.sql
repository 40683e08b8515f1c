-- Migration 3 -> 4: the token_events table (issue 20: served models), empty until a streaming
-- `http.openai` stage is loaded. Run by analysis/warehouse/migrations.py inside one transaction, together
-- with the schema_info row that records version 4. Idempotent (IF NOT EXISTS); the definition
-- is schema.sql's, column for column (a migrated warehouse equals a new one).
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

-- Migration 1 -> 2: the additions of issue 9 (stage library), for warehouses written before the
-- schema recorded its version (no schema_info table: version 1).
-- Run by analysis/warehouse/migrations.py inside one transaction, together with the schema_info row that
-- records version 2, so a failure leaves the warehouse at version 1. Every statement is
-- idempotent (IF NOT EXISTS), so it is also safe on a warehouse that already has some of them.

-- First the columns older than issue 9 (generation timings from the first schema, joined_ns
-- from issue 8), so a warehouse from before issue 8 reaches version 2 as well; no-ops on an
-- issue-8 warehouse. Added first, so the columns end up in schema.sql's order (SELECT *).
ALTER TABLE stage_events ADD COLUMN IF NOT EXISTS first_token_ns BIGINT;
ALTER TABLE stage_events ADD COLUMN IF NOT EXISTS tokens INTEGER;
ALTER TABLE stage_events ADD COLUMN IF NOT EXISTS joined_ns BIGINT;

-- stage_events outcome columns: samples graded and answered right (accuracy = correct / graded),
-- and a training step's loss. Existing rows get NULL: those runs recorded no outcome.
ALTER TABLE stage_events ADD COLUMN IF NOT EXISTS graded INTEGER;
ALTER TABLE stage_events ADD COLUMN IF NOT EXISTS correct INTEGER;
ALTER TABLE stage_events ADD COLUMN IF NOT EXISTS loss DOUBLE;

-- A short-lived development state of issue 9 had `correct BOOLEAN` (one answer per visit); the
-- column is a count of samples now. true -> 1, false -> 0; a no-op on an INTEGER column.
ALTER TABLE stage_events ALTER COLUMN correct TYPE INTEGER;

-- Operator profiling spans (see schema.sql for the meaning of each column). Empty for every run
-- loaded before: those runs profiled nothing.
CREATE TABLE IF NOT EXISTS operator_spans (
    run_id VARCHAR NOT NULL,
    trial INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    pipeline VARCHAR,
    query_id BIGINT NOT NULL,
    stage VARCHAR NOT NULL,
    visit INTEGER NOT NULL,
    operator VARCHAR NOT NULL,
    start_ns BIGINT NOT NULL,
    end_ns BIGINT NOT NULL,
    device_type VARCHAR NOT NULL,
    device_index INTEGER,
    thread_id BIGINT,
    self_cpu_ns BIGINT,
    total_cpu_ns BIGINT,
    input_shapes VARCHAR
);

-- The version table itself (its definition is in schema.sql); the migration runner inserts the
-- row for version 2 after this file, in the same transaction.
CREATE TABLE IF NOT EXISTS schema_info (
    version INTEGER NOT NULL,
    written_by VARCHAR,
    migrated_at TIMESTAMPTZ NOT NULL
);

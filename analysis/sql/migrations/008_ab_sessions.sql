-- Migration 7 -> 8: the A/B session's tables (issue 44): ab_sessions and ab_blocks, empty until
-- a session folder is loaded (analysis.ab). Run by analysis/warehouse/migrations.py inside one
-- transaction, together with the schema_info row that records version 8. Every statement is
-- idempotent (IF NOT EXISTS). The definitions are schema.sql's, column for column (a migrated
-- warehouse equals a new one).

-- A/B sessions (`collobench ab`, stages/ab): one row per session folder `ab/<session_id>/`,
-- from its session.json (stages.contracts.ab_files.SessionRecord) and the count of complete
-- blocks in segments.jsonl. Loaded by analysis.ab.warehouse_tables.load_session, idempotently:
-- delete-then-insert by session_id in one transaction, together with the session's ab_blocks.
-- The segments' own run directories are loaded as ordinary runs (`runs`, keyed by run_id).
CREATE TABLE IF NOT EXISTS ab_sessions (
    session_id VARCHAR PRIMARY KEY,
    created_at TIMESTAMPTZ,         -- when the session started (UTC)
    mode VARCHAR NOT NULL,          -- interleaved | duet
    aa BOOLEAN NOT NULL,            -- both arms the same: an A/A session (noise only)
    spec_hash VARCHAR,              -- arm A's spec hash
    machine_class VARCHAR,          -- where it ran (run_history's class)
    seed BIGINT NOT NULL,           -- seeds the block orders and arrival seeds
    margin_pct DOUBLE NOT NULL,     -- the equivalence margin, +- %
    budget_min DOUBLE NOT NULL,     -- the blocks' wall-clock budget, minutes
    boundary VARCHAR NOT NULL,      -- obrien-fleming | pocock
    looks_blocks INTEGER[] NOT NULL, -- block counts of the planned looks
    status VARCHAR NOT NULL,        -- running | decided | budget_spent | all_looks | interrupted | failed
    block_s DOUBLE,                 -- measured seconds per block (warm-up)
    arm_a VARCHAR,                  -- arm A's description (a spec, a venv, a revision)
    arm_b VARCHAR,                  -- arm B's
    repo_dirty BOOLEAN NOT NULL,    -- the revision arms' repository had uncommitted changes
    blocks_done INTEGER NOT NULL,   -- blocks with both segments recorded
    verdicts JSON,                  -- session.json `verdicts`: one object per figure
    dropped_blocks JSON,            -- session.json `dropped_blocks`: [[block, why], ...]
    session_dir VARCHAR NOT NULL,   -- where the session folder was when it was loaded
    loaded_at TIMESTAMPTZ NOT NULL
);

-- One row per measured segment of an A/B session (a line of segments.jsonl): one arm's run in
-- one block. dropped / dropped_reason come from session.json's dropped_blocks (the judgement
-- that dropped the block, a spoiled block's partner of the other order included).
CREATE TABLE IF NOT EXISTS ab_blocks (
    session_id VARCHAR NOT NULL,
    block INTEGER NOT NULL,         -- block index, from 0
    block_order VARCHAR NOT NULL,   -- segments.jsonl `order`: AB | BA
    arm VARCHAR NOT NULL,           -- A | B
    position INTEGER NOT NULL,      -- 0: the block's first segment, 1: its second
    seed BIGINT NOT NULL,           -- the block's arrival seed (both arms alike)
    run_id VARCHAR NOT NULL,        -- the segment's run (runs.run_id once loaded)
    run_dir VARCHAR NOT NULL,
    status VARCHAR NOT NULL,        -- the segment run's status
    error VARCHAR,
    wall_s DOUBLE NOT NULL,         -- wall time of the segment, start-up included
    calibration_score DOUBLE,
    foreign_cpu_cores DOUBLE,
    dropped BOOLEAN NOT NULL,       -- the block is left out of the verdicts
    dropped_reason VARCHAR,         -- why; NULL when kept
    "values" JSON,                  -- 'pipeline/metric' -> the segment's figure
    higher_is_worse JSON            -- metric -> whether higher is worse
);

-- collobench warehouse schema: what the warehouse itself stores. One row per run in `runs`, one
-- row per registered Parquet file in `run_files` (the raw rows stay in the run directories: the
-- raw tables `queries`, `stage_events`, ... are views over those files, shaped by their Arrow
-- schemas in stages/rundir/schemas.py: analysis/warehouse/registered_files.py), the per-run summary tables the view files define (summary_*), and the
-- capacity searches and A/B sessions. Loading is idempotent: the loader deletes a run_id's rows from every
-- stored table, then inserts them again, in one transaction.

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

-- One row per Parquet file of a loaded run (analysis/warehouse/registered_files.py): the raw-table views read
-- exactly these files. bytes and mtime_ns are the file's size and modification time when it
-- was registered: a reader refuses to open the warehouse when a file is missing or changed
-- (the run directory moved, was deleted or rewritten) instead of giving other numbers.
CREATE TABLE IF NOT EXISTS run_files (
    run_id VARCHAR NOT NULL,
    table_name VARCHAR NOT NULL,    -- the raw table it holds rows of (queries, stage_events...)
    path VARCHAR NOT NULL,          -- absolute path of the file
    rows BIGINT NOT NULL,           -- rows in the file (its Parquet footer)
    bytes BIGINT NOT NULL,          -- size when registered
    mtime_ns BIGINT NOT NULL,       -- modification time when registered (ns since the epoch)
    columns VARCHAR[] NOT NULL      -- the file's column names (a newer column may be missing)
);

-- Capacity searches (`collobench capacity`, stages/capacity): one row per search directory
-- `<out>/<search_id>/`, from its search.json (what was asked) and capacity.json (the answer;
-- the answer's columns are NULL while a search is unfinished). Loaded by
-- analysis.capacity.warehouse_tables.load_search, idempotently: delete-then-insert by search_id in one
-- transaction, together with the search's rows in capacity_probes. Rates are offered queries
-- per second of the target pipeline; for a region ray (`ray` set, pipeline 'A+B') they are the
-- ray's scale s instead (pipeline i offered s * ray[i]). The columns after loaded_at came with
-- version 7 (migrations/007_capacity_endings.sql adds them last, where ADD COLUMN puts them).
CREATE TABLE IF NOT EXISTS capacity_searches (
    search_id VARCHAR PRIMARY KEY,
    pipeline VARCHAR NOT NULL,      -- the target pipeline ('A+B' for a region ray)
    slo_ms DOUBLE NOT NULL,         -- the latency objective
    percentile DOUBLE NOT NULL,     -- the percentile it bounds (0.99)
    precision DOUBLE,               -- converged when the lowest rate not met above
                                    -- bracket_lo is within 1 + precision of it
    max_probes INTEGER,             -- the probe budget, the ceiling probe included
    probe_s DOUBLE,                 -- each probe's measured window
    with_rates JSON,                -- capacity.json `with`: co-runner -> fixed offered rate (q/s)
    ray JSON,                       -- region rays only: pipeline -> its rate per unit of s
    base_seed INTEGER,              -- the first probe's seed
    min_rate DOUBLE,                -- a floor the search does not probe below; NULL: the
                                    -- lowest rate the time budget decides is the floor
    spec_source VARCHAR,
    spec_hash VARCHAR,              -- sha256 of the normalised spec
    certified_qps DOUBLE,           -- the highest met rate below the lowest not-met one
    estimate_qps DOUBLE,            -- where the isotonic fit of over_slo/queries crosses 1 - p
    estimate_ci95_low DOUBLE,       -- estimate_ci95[0]
    estimate_ci95_high DOUBLE,      -- estimate_ci95[1]
    bracket_lo DOUBLE,              -- bracket[0] (the certified rate)
    bracket_hi DOUBLE,              -- the lowest rate proven missed above bracket_lo; NULL
                                    -- when none was (the search stops on the lowest rate
                                    -- not met, which may lie below it)
    -- converged | max_probes | infeasible | ceiling | undecidable | budget; NULL: still running
    stop_reason VARCHAR,
    ceiling_qps DOUBLE,             -- the ceiling probe's throughput
    monotonicity_violations INTEGER, -- pairs of probes out of monotone order
    flagged_probes INTEGER,         -- probes undecided on two seeds
    probes INTEGER NOT NULL,        -- probes recorded (rows in capacity_probes)
    estimate_method VARCHAR,        -- how the estimate and its interval were computed
    complete BOOLEAN NOT NULL,      -- capacity.json was there (the search ended)
    search_dir VARCHAR NOT NULL,    -- where the search directory was when it was loaded
    loaded_at TIMESTAMPTZ NOT NULL,
    stop_detail VARCHAR,            -- the evidence behind stop_reason, a sentence; NULL: none
    spent_s DOUBLE,                 -- wall time of every probe (s); NULL: running, or older
    budget_s DOUBLE,                -- the search's time budget (s, --budget-min); NULL: unbounded
    min_queries INTEGER             -- measured queries a probe holds at least; NULL: LoadGen's
                                    -- minimum for the percentile (459 at p99)
);

-- One row per probe of a search (capacity.json's `probes`, or probes.jsonl while the search is
-- unfinished): a run of the spec at one offered rate, the closed-loop ceiling probe, or the
-- unloaded probe (one query at a time; it has a verdict, but is not a search probe). The
-- columns after pipelines came with version 7 (007_capacity_endings.sql adds them last).
CREATE TABLE IF NOT EXISTS capacity_probes (
    search_id VARCHAR NOT NULL,
    probe_index INTEGER NOT NULL,   -- the probe's `index`: 0, 1, ... in the order they ran
    kind VARCHAR NOT NULL,          -- ceiling | search | unloaded
    rate DOUBLE NOT NULL,           -- offered q/s of the target (a ray: the scale s); 0:
                                    -- the ceiling and unloaded probes (closed loop)
    seed INTEGER NOT NULL,          -- the spec seed it ran with (a re-probe takes the next)
    queries BIGINT NOT NULL,        -- the target's measured queries, failures included
    over_slo BIGINT NOT NULL,       -- of them over the SLO, failures counted as over
    over_slo_share DOUBLE,          -- over_slo / queries; NULL when no query was measured
    verdict VARCHAR,                -- met | missed | undecided; NULL: the ceiling probe, a failure
    p99_ms DOUBLE,                  -- the target's p99 over every measured query
    abort_reason VARCHAR,           -- why it stopped early (could no longer pass: see
                                    -- cannot_pass; a growing backlog: missed), or failed
    run_dir VARCHAR,                -- the probe's run directory; NULL when simulated
    flagged BOOLEAN NOT NULL,       -- undecided on two seeds: counted as not met
    throughput_qps DOUBLE,          -- the target's completed ok queries per second
    duration_s DOUBLE,              -- wall time of the probe
    design_effect DOUBLE,           -- variance inflation from bursts the verdict divided by
    pipelines JSON,                 -- every pipeline's figures in the probe, by name
    window_s DOUBLE,                -- the measured window planned (s); NULL: recorded before
                                    -- windows were sized by rate
    cannot_pass BOOLEAN DEFAULT false -- stopped early by the count rule without proof of a
                                    -- miss: verdict undecided, counted as not met
);

-- One row per ray of a capacity region (`collobench capacity --region A,B`, region.json in
-- `<out>/<region_id>/`): along the ray, pipeline A is offered s * direction_a * solo_capacity_a
-- and B s * direction_b * solo_capacity_b (direction = (cos, sin) of angle_deg); s is the
-- ray's searched scale. Loaded by analysis.capacity.warehouse_tables.load_region, delete-then-insert
-- by region_id.
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

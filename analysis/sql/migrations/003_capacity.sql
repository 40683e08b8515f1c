-- Migration 2 -> 3: the capacity search's tables (issue 19): capacity_searches,
-- capacity_probes and capacity_region_rays, empty until a search or region is loaded
-- (analysis.capacity). Run by analysis/warehouse/migrations.py inside one transaction, together with the
-- schema_info row that records version 3. Every statement is idempotent (IF NOT EXISTS). The
-- definitions are schema.sql's, column for column (a migrated warehouse equals a new one).

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

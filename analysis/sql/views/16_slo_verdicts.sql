-- slo_verdicts: each pipeline's verdict on its latency SLO in each phase of each run, read from
-- the manifest stored in `runs` (its `results`: the verdict and the counts it was decided on,
-- as the run summary computed them at the phase's end), so
-- `collobench sql "SELECT * FROM slo_verdicts WHERE slo_verdict <> 'met'"` lists what failed
-- or could not be proven. One row per (run_id, trial, phase, pipeline) whose spec sets slo_ms:
--   slo_ms       the latency objective (ms from the scheduled arrival);
--   percentile   the share of queries that must meet it (0.99; 0.90 for single_stream);
--   queries      every measured query (warm-up excluded, failures included);
--   over_slo     those over slo_ms, failures (dropped, error, timeout) among them;
--   slo_verdict  met: LoadGen's early-stopping rule bounds the over-SLO share below
--                1 - percentile at 99% confidence (queries >= h(over_slo) + over_slo);
--                missed: its mirror binomial test bounds the share above 1 - percentile
--                (P[Bin(queries, 1 - percentile) >= over_slo] < 0.01);
--                undecided: neither (too few queries to tell), not a pass.
-- A result without a verdict (no SLO, or a run launched without the analysis layer) has no row.
CREATE OR REPLACE VIEW slo_verdicts AS
SELECT
    r.run_id,
    CAST(o ->> '$.trial' AS INTEGER) AS trial,
    o ->> '$.phase' AS phase,
    o ->> '$.pipeline' AS pipeline,
    TRY_CAST(o ->> '$.summary.slo_ms' AS DOUBLE) AS slo_ms,
    TRY_CAST(o ->> '$.summary.target_percentile' AS DOUBLE) AS percentile,
    TRY_CAST(o ->> '$.summary.queries_measured' AS BIGINT) AS queries,
    TRY_CAST(o ->> '$.summary.queries_over_slo' AS BIGINT) AS over_slo,
    o ->> '$.slo_verdict' AS slo_verdict
FROM runs AS r,
    unnest(CAST(r.manifest -> '$.results' AS JSON[])) AS t(o)
WHERE o ->> '$.slo_verdict' IS NOT NULL;

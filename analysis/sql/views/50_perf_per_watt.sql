-- perf_per_watt: work per joule, per (run_id, trial, phase, pipeline, device) row of `energy`.
-- The work is what ran in that row's load window: for a solo baseline, its own ok queries; for
-- the collocated phase (pipeline NULL), the ok queries of every pipeline. Counts come from
-- `throughput` (warm-up excluded) and the energy is measured over the window of those same
-- non-warm-up queries (see `load_windows`), so model loading, warm-up and drain count on
-- neither side. Energy is NULL unless samples bracket both window edges (window_covered;
-- coverage says how much of the window was spanned otherwise), so a figure is never of part of
-- a window. Every figure is NULL when the energy is NULL; energy_source says what measured it.
-- dynamic_*: the same with the measured idle power subtracted (`energy`.dynamic_energy_j), the
-- energy the load itself caused; NULL without an idle baseline.
CREATE OR REPLACE VIEW perf_per_watt AS
WITH work AS (
    SELECT
        run_id,
        trial,
        phase,
        CASE WHEN phase = 'solo' THEN pipeline END AS pipeline,
        CAST(sum(ok_queries) AS BIGINT) AS ok_queries,
        CAST(sum(ok_samples) AS BIGINT) AS ok_samples
    FROM throughput
    GROUP BY run_id, trial, phase, CASE WHEN phase = 'solo' THEN pipeline END
)
SELECT
    e.run_id,
    e.trial,
    e.phase,
    e.pipeline,
    e.device,
    e.energy_source,
    e.energy_j,
    e.mean_power_w,
    e.window_s,
    e.window_covered,
    e.coverage,
    w.ok_queries,
    w.ok_samples,
    w.ok_queries / nullif(e.energy_j, 0) AS queries_per_j,
    w.ok_samples / nullif(e.energy_j, 0) AS samples_per_j,
    e.energy_j / nullif(w.ok_queries, 0) AS j_per_query,
    e.idle_power_w,
    e.dynamic_energy_j,
    w.ok_queries / nullif(e.dynamic_energy_j, 0) AS dynamic_queries_per_j,
    e.dynamic_energy_j / nullif(w.ok_queries, 0) AS dynamic_j_per_query
FROM energy AS e
LEFT JOIN work AS w
    ON e.run_id = w.run_id
    AND e.trial = w.trial
    AND e.phase = w.phase
    AND e.pipeline IS NOT DISTINCT FROM w.pipeline;

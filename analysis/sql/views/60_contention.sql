-- contention: each pipeline collocated vs alone, per (run_id, trial, pipeline).
-- throughput_ratio = collocated / solo queries per second (1 = unaffected, 0.5 = halved);
-- p50_slowdown and p99_slowdown = collocated / solo latency (2 = twice as slow).
-- Energy (NULL unless measured, summed over the devices that have a source), each over its
-- load window only (see `energy`: model loading, warm-up and drain left out):
--   solo_energy_j           this pipeline's own solo baseline;
--   solo_baselines_energy_j every pipeline's solo baseline of the trial added up (NULL unless
--                           all of them were measured);
--   collocated_energy_j     the collocated load window (all pipelines at once);
--   energy_saved_j          solo_baselines_energy_j - collocated_energy_j: positive when running
--                           the pipelines together cost less energy than running them in turn.
-- Rows come from the collocated phase; solo figures are NULL when a baseline is missing.
CREATE OR REPLACE VIEW contention AS
WITH figures AS (
    SELECT
        t.run_id,
        t.trial,
        t.phase,
        t.pipeline,
        t.queries_per_s,
        l.latency_p50_ms,
        l.latency_p99_ms
    FROM throughput AS t
    LEFT JOIN latency AS l USING (run_id, trial, phase, pipeline)
),
phase_energy AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        sum(energy_j) AS energy_j,
        string_agg(DISTINCT energy_source, '+' ORDER BY energy_source) AS energy_source
    FROM energy
    WHERE energy_j IS NOT NULL
    GROUP BY run_id, trial, phase, pipeline
),
collocated_pipelines AS (
    SELECT run_id, trial, count(*) AS pipelines
    FROM figures
    WHERE phase = 'collocated'
    GROUP BY run_id, trial
),
solo_total AS (
    SELECT run_id, trial, count(*) AS measured, sum(energy_j) AS energy_j
    FROM phase_energy
    WHERE phase = 'solo'
    GROUP BY run_id, trial
)
SELECT
    c.run_id,
    c.trial,
    c.pipeline,
    s.queries_per_s AS solo_queries_per_s,
    c.queries_per_s AS collocated_queries_per_s,
    c.queries_per_s / nullif(s.queries_per_s, 0) AS throughput_ratio,
    s.latency_p50_ms AS solo_p50_ms,
    c.latency_p50_ms AS collocated_p50_ms,
    c.latency_p50_ms / nullif(s.latency_p50_ms, 0) AS p50_slowdown,
    s.latency_p99_ms AS solo_p99_ms,
    c.latency_p99_ms AS collocated_p99_ms,
    c.latency_p99_ms / nullif(s.latency_p99_ms, 0) AS p99_slowdown,
    se.energy_j AS solo_energy_j,
    CASE WHEN st.measured = cp.pipelines THEN st.energy_j END AS solo_baselines_energy_j,
    ce.energy_j AS collocated_energy_j,
    CASE WHEN st.measured = cp.pipelines THEN st.energy_j END - ce.energy_j AS energy_saved_j,
    ce.energy_source
FROM figures AS c
JOIN collocated_pipelines AS cp ON c.run_id = cp.run_id AND c.trial = cp.trial
LEFT JOIN figures AS s
    ON c.run_id = s.run_id AND c.trial = s.trial AND c.pipeline = s.pipeline
    AND s.phase = 'solo'
LEFT JOIN phase_energy AS se
    ON c.run_id = se.run_id AND c.trial = se.trial AND se.phase = 'solo'
    AND se.pipeline = c.pipeline
LEFT JOIN phase_energy AS ce
    ON c.run_id = ce.run_id AND c.trial = ce.trial AND ce.phase = 'collocated'
LEFT JOIN solo_total AS st ON c.run_id = st.run_id AND c.trial = st.trial
WHERE c.phase = 'collocated';

-- phase_figures: the headline figures of one (run_id, trial, phase, pipeline) side by side,
-- with the batch-means standard errors their intervals come from: queries/s from `throughput`,
-- verdict p50/p99 from `latency`, and the failed measured queries. What `contention` pairs
-- (collocated against solo) and `collobench compare` pairs (run B against run A).
CREATE OR REPLACE VIEW phase_figures AS
SELECT
    t.run_id,
    t.trial,
    t.phase,
    t.pipeline,
    t.queries_per_s,
    t.queries_per_s_se,
    l.latency_p50_ms,
    l.latency_p50_se_ms,
    l.latency_p99_ms,
    l.latency_p99_se_ms,
    l.failed_queries
FROM throughput AS t
LEFT JOIN latency AS l USING (run_id, trial, phase, pipeline);

-- The run summary's figures per (trial, phase, pipeline): read from `throughput` and `latency`
-- (the one implementation of each figure), optionally for one trial and phase only
-- ($trial / $phase NULL: all). Used by analysis/reports/headline_figures.py on an in-memory database that
-- holds one run directory.
SELECT
    t.trial,
    t.phase,
    t.pipeline,
    l.measured_queries,
    t.ok_queries,
    l.failed_queries,
    t.errors,
    t.dropped,
    t.timeouts,
    t.not_issued,
    t.queries_per_s,
    t.queries_per_s_ci_low,
    t.queries_per_s_ci_high,
    t.samples_per_s,
    l.latency_p50_ms,
    l.latency_p50_ci_low_ms,
    l.latency_p50_ci_high_ms,
    l.latency_p90_ms,
    l.latency_p90_ci_low_ms,
    l.latency_p90_ci_high_ms,
    l.latency_p99_ms,
    l.latency_p99_ci_low_ms,
    l.latency_p99_ci_high_ms,
    l.completed_p50_ms,
    l.completed_p90_ms,
    l.completed_p99_ms,
    l.from_issue_p50_ms,
    l.from_issue_p99_ms,
    l.issue_delay_p50_us,
    l.issue_delay_p99_us,
    l.issue_delay_over_100us_share,
    l.ci_method AS latency_ci_method,
    t.ci_method AS throughput_ci_method
FROM throughput AS t
JOIN latency AS l USING (run_id, trial, phase, pipeline)
WHERE ($trial IS NULL OR t.trial = $trial) AND ($phase IS NULL OR t.phase = $phase)
ORDER BY t.trial, t.phase, t.pipeline;

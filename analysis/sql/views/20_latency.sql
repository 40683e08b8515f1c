-- latency: end-to-end latency percentiles per (run_id, trial, phase, pipeline).
-- Latency = completed_ns - scheduled_ns of `ok`, non-warm-up queries (from the scheduled
-- arrival, never from issue: no coordinated omission). Percentiles interpolate linearly
-- (quantile_cont, like numpy's default). Issue delay = issued_ns - scheduled_ns over every
-- non-warm-up query that has an issue time (dropped ones included: their refusal time).
CREATE OR REPLACE VIEW latency AS
SELECT
    run_id,
    trial,
    phase,
    pipeline,
    count(*) FILTER (WHERE status = 'ok') AS ok_queries,
    quantile_cont((completed_ns - scheduled_ns) / 1e6, 0.5) FILTER (WHERE status = 'ok')
        AS latency_p50_ms,
    quantile_cont((completed_ns - scheduled_ns) / 1e6, 0.9) FILTER (WHERE status = 'ok')
        AS latency_p90_ms,
    quantile_cont((completed_ns - scheduled_ns) / 1e6, 0.95) FILTER (WHERE status = 'ok')
        AS latency_p95_ms,
    quantile_cont((completed_ns - scheduled_ns) / 1e6, 0.99) FILTER (WHERE status = 'ok')
        AS latency_p99_ms,
    quantile_cont((completed_ns - scheduled_ns) / 1e6, 0.999) FILTER (WHERE status = 'ok')
        AS latency_p999_ms,
    avg((completed_ns - scheduled_ns) / 1e6) FILTER (WHERE status = 'ok') AS latency_mean_ms,
    max((completed_ns - scheduled_ns) / 1e6) FILTER (WHERE status = 'ok') AS latency_max_ms,
    quantile_cont((issued_ns - scheduled_ns) / 1e3, 0.5) AS issue_delay_p50_us,
    quantile_cont((issued_ns - scheduled_ns) / 1e3, 0.99) AS issue_delay_p99_us
FROM queries
WHERE NOT warmup
GROUP BY run_id, trial, phase, pipeline;

-- The latency percentiles of analysis_speed.py's comparison with pandas: LoadGen's p50, p90,
-- p95, p99 and p99.9 of every measured query's verdict latency (+inf for a query that did not
-- complete ok), per (run_id, trial, phase, pipeline), computed from the raw rows, as the loader
-- does when it stores the `latency` summary (query_latency and loadgen_quantile are the views'
-- own definitions).
SELECT
    run_id,
    trial,
    phase,
    pipeline,
    loadgen_quantile(verdict_ms, 0.5) AS p50_ms,
    loadgen_quantile(verdict_ms, 0.9) AS p90_ms,
    loadgen_quantile(verdict_ms, 0.95) AS p95_ms,
    loadgen_quantile(verdict_ms, 0.99) AS p99_ms,
    loadgen_quantile(verdict_ms, 0.999) AS p999_ms
FROM query_latency
GROUP BY run_id, trial, phase, pipeline
ORDER BY run_id, trial, phase, pipeline;

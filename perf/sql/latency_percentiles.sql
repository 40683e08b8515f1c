-- The latency percentiles of analysis_speed.py's comparison with pandas: LoadGen's p50, p90,
-- p95, p99 and p99.9 of every measured query's verdict latency (+inf for a query that did not
-- complete ok), per (run_id, trial, phase, pipeline), computed from the raw rows, as the loader
-- does when it stores the `latency` summary (query_latency and loadgen_quantiles are the views'
-- own definitions).
SELECT
    run_id,
    trial,
    phase,
    pipeline,
    verdict[1] AS p50_ms,
    verdict[2] AS p90_ms,
    verdict[3] AS p95_ms,
    verdict[4] AS p99_ms,
    verdict[5] AS p999_ms
FROM (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        loadgen_quantiles(verdict_ms, [0.5, 0.9, 0.95, 0.99, 0.999]) AS verdict
    FROM query_latency
    GROUP BY run_id, trial, phase, pipeline
)
ORDER BY run_id, trial, phase, pipeline;

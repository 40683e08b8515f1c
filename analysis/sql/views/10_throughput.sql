-- throughput: completed work per (run_id, trial, phase, pipeline), warm-up excluded.
-- The window runs from the first scheduled arrival to the last completion among non-warm-up
-- queries, so a backlog that drains late lengthens the window instead of being hidden.
-- queries_per_s and samples_per_s count only `ok` queries; dropped, errors and timeouts are
-- reported beside them so overload stays visible. NULL rates: nothing completed.
CREATE OR REPLACE VIEW throughput AS
WITH counted AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        count(*) AS queries,
        count(*) FILTER (WHERE status = 'ok') AS ok_queries,
        CAST(coalesce(sum(samples) FILTER (WHERE status = 'ok'), 0) AS BIGINT) AS ok_samples,
        count(*) FILTER (WHERE status = 'dropped') AS dropped,
        count(*) FILTER (WHERE status = 'error') AS errors,
        count(*) FILTER (WHERE status = 'timeout') AS timeouts,
        min(scheduled_ns) AS window_start_ns,
        max(completed_ns) AS window_end_ns
    FROM queries
    WHERE NOT warmup
    GROUP BY run_id, trial, phase, pipeline
)
SELECT
    run_id,
    trial,
    phase,
    pipeline,
    queries,
    ok_queries,
    ok_samples,
    dropped,
    errors,
    timeouts,
    window_start_ns,
    window_end_ns,
    (window_end_ns - window_start_ns) / 1e9 AS window_s,
    ok_queries / nullif((window_end_ns - window_start_ns) / 1e9, 0) AS queries_per_s,
    ok_samples / nullif((window_end_ns - window_start_ns) / 1e9, 0) AS samples_per_s
FROM counted;

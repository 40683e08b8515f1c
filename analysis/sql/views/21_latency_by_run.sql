-- latency_by_run: the headline figures over the trials of a run, per (run_id, phase, pipeline).
-- Each figure is the mean of the per-trial values (verdict p50 and p99 from `latency`,
-- queries_per_s from `throughput`), with a Student-t 95% interval over the trials: mean +-
-- t975(n - 1) * stddev / sqrt(n) (ci_method 't_over_trials'). Unlike a percentile bootstrap
-- (which covers ~75% at 3 trials for a nominal 95%), its coverage holds from 2-3 trials on for
-- roughly normal per-trial values. NULL interval with fewer than 2 trials having a finite value;
-- a mean over an infinite trial value is +inf (that trial failed over 1 - p of its queries).
CREATE OR REPLACE VIEW latency_by_run AS
WITH per_trial AS (
    SELECT
        t.run_id,
        t.phase,
        t.pipeline,
        t.trial,
        l.latency_p50_ms,
        l.latency_p99_ms,
        t.queries_per_s,
        l.measured_queries,
        l.failed_queries
    FROM throughput AS t
    LEFT JOIN latency AS l USING (run_id, trial, phase, pipeline)
),
summed AS (
    SELECT
        run_id,
        phase,
        pipeline,
        count(*) AS trials,
        CAST(sum(measured_queries) AS BIGINT) AS measured_queries,
        CAST(sum(failed_queries) AS BIGINT) AS failed_queries,
        avg(latency_p50_ms) AS latency_p50_ms,
        count(latency_p50_ms) FILTER (WHERE isfinite(latency_p50_ms)) AS p50_n,
        count(latency_p50_ms) AS p50_all,
        stddev_samp(latency_p50_ms) FILTER (WHERE isfinite(latency_p50_ms)) AS p50_sd,
        avg(latency_p99_ms) AS latency_p99_ms,
        count(latency_p99_ms) FILTER (WHERE isfinite(latency_p99_ms)) AS p99_n,
        count(latency_p99_ms) AS p99_all,
        stddev_samp(latency_p99_ms) FILTER (WHERE isfinite(latency_p99_ms)) AS p99_sd,
        avg(queries_per_s) AS queries_per_s,
        count(queries_per_s) AS qps_n,
        stddev_samp(queries_per_s) AS qps_sd
    FROM per_trial
    GROUP BY run_id, phase, pipeline
),
-- Half-widths; only where every trial with a value has a finite one.
halves AS (
    SELECT
        *,
        CASE WHEN p50_n >= 2 AND p50_n = p50_all THEN t975(p50_n - 1) * p50_sd / sqrt(p50_n) END
            AS p50_half,
        CASE WHEN p99_n >= 2 AND p99_n = p99_all THEN t975(p99_n - 1) * p99_sd / sqrt(p99_n) END
            AS p99_half,
        CASE WHEN qps_n >= 2 THEN t975(qps_n - 1) * qps_sd / sqrt(qps_n) END AS qps_half
    FROM summed
)
SELECT
    run_id,
    phase,
    pipeline,
    trials,
    measured_queries,
    failed_queries,
    latency_p50_ms,
    latency_p50_ms - p50_half AS latency_p50_ci_low_ms,
    latency_p50_ms + p50_half AS latency_p50_ci_high_ms,
    latency_p99_ms,
    latency_p99_ms - p99_half AS latency_p99_ci_low_ms,
    latency_p99_ms + p99_half AS latency_p99_ci_high_ms,
    queries_per_s,
    queries_per_s - qps_half AS queries_per_s_ci_low,
    queries_per_s + qps_half AS queries_per_s_ci_high,
    CASE
        WHEN coalesce(p50_half, p99_half, qps_half) IS NOT NULL THEN 't_over_trials'
    END AS ci_method
FROM halves;

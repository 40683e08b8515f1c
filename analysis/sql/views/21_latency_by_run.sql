-- latency_by_run: latency aggregated over the trials of a run, per (run_id, phase, pipeline).
-- pooled_*: percentiles of all trials' ok, non-warm-up queries taken together;
-- trial_mean_* / trial_stddev_*: the spread of the per-trial percentiles of `latency`, the
-- figure repeats exist for. Bootstrap confidence intervals of the trial means are computed in
-- Python (analysis/report.py) when there are enough trials.
CREATE OR REPLACE VIEW latency_by_run AS
WITH pooled AS (
    SELECT
        run_id,
        phase,
        pipeline,
        count(DISTINCT trial) AS trials,
        count(*) AS ok_queries,
        quantile_cont((completed_ns - scheduled_ns) / 1e6, 0.5) AS pooled_p50_ms,
        quantile_cont((completed_ns - scheduled_ns) / 1e6, 0.9) AS pooled_p90_ms,
        quantile_cont((completed_ns - scheduled_ns) / 1e6, 0.95) AS pooled_p95_ms,
        quantile_cont((completed_ns - scheduled_ns) / 1e6, 0.99) AS pooled_p99_ms,
        quantile_cont((completed_ns - scheduled_ns) / 1e6, 0.999) AS pooled_p999_ms
    FROM queries
    WHERE NOT warmup AND status = 'ok'
    GROUP BY run_id, phase, pipeline
),
per_trial AS (
    SELECT
        run_id,
        phase,
        pipeline,
        avg(latency_p50_ms) AS trial_mean_p50_ms,
        stddev_samp(latency_p50_ms) AS trial_stddev_p50_ms,
        avg(latency_p99_ms) AS trial_mean_p99_ms,
        stddev_samp(latency_p99_ms) AS trial_stddev_p99_ms
    FROM latency
    GROUP BY run_id, phase, pipeline
)
SELECT *
FROM pooled
LEFT JOIN per_trial USING (run_id, phase, pipeline);

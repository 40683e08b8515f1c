-- compare: run B against run A ($run_a, $run_b), per (trial, phase, pipeline, metric), and over
-- the trials when both runs have two or more in common. Run by analysis/history/compare.py on a
-- read-only connection; it reads `phase_figures` (each phase's `throughput` and `latency`
-- figures, warm-up excluded there).
-- One row per figure (long format, so a regression check can filter on `verdict`):
--   metric       queries_per_s (higher = faster), latency_p50_ms, latency_p99_ms (the verdict
--                percentiles of `latency`: a failed query counts as +inf; higher = slower);
--   a_value, b_value  the figure in each run (over trials: the mean of the per-trial values);
--   ratio        b_value / a_value. For latency: 'inf' when only B is infinite (B lost over
--                1 - p of its queries, A did not), 0 when only A is, NULL when both are;
--   ratio_ci_low, ratio_ci_high  its 95% interval, with ci_method:
--     per trial  'batch_means_delta', as in `contention`: the delta method on log(B / A) from
--                each run's batch-means standard error (`queries_per_s_se`,
--                `latency_p*_se_ms`), Welch-Satterthwaite degrees of freedom (log_ratio_half);
--     over trials (trial NULL, `trials` >= 2)  'log_t_over_trials', as in `contention_by_run`:
--                trial i of A is paired with trial i of B (the same spec gives them the same
--                seed, arrival schedule and phase order), and the ratio is the geometric mean
--                of the per-trial ratios with a Student-t interval on their logs,
--                exp(mean +- t975(n - 1) * sd / sqrt(n)), over the n trials with a finite
--                positive ratio;
--   verdict      ci_verdict with its +-1% band, worded 'faster', 'slower' or 'no measurable
--                change'; an infinite ratio is 'slower' and a zero latency ratio (only A
--                infinite) 'faster' without an interval; over trials, infinite trials on one
--                side only decide the verdict the same way. NULL without an interval (too few
--                queries per batch, fewer than 2 trials with finite ratios, or a pipeline or
--                phase present in one run only: then one side's columns are NULL).
--   a_failed_queries, b_failed_queries  measured queries that did not complete ok.
WITH figures AS MATERIALIZED (
    SELECT * FROM phase_figures WHERE run_id = $run_a OR run_id = $run_b
),
-- One row per figure: the metric's value, its batch-means standard error and direction.
long AS (
    SELECT run_id, trial, phase, pipeline, 1 AS metric_order, 'queries_per_s' AS metric,
        queries_per_s AS value, queries_per_s_se AS se, failed_queries
    FROM figures
    UNION ALL
    SELECT run_id, trial, phase, pipeline, 2, 'latency_p50_ms',
        latency_p50_ms, latency_p50_se_ms, failed_queries
    FROM figures
    UNION ALL
    SELECT run_id, trial, phase, pipeline, 3, 'latency_p99_ms',
        latency_p99_ms, latency_p99_se_ms, failed_queries
    FROM figures
),
-- A and B side by side; a full join keeps a pipeline or phase that only one run has.
paired AS (
    SELECT
        trial,
        phase,
        pipeline,
        metric,
        coalesce(a.metric_order, b.metric_order) AS metric_order,
        CASE WHEN metric = 'queries_per_s' THEN 'faster' ELSE 'slower' END AS higher_is,
        a.value AS a_value,
        b.value AS b_value,
        CASE
            WHEN isinf(a.value) AND isinf(b.value) THEN NULL
            WHEN isinf(b.value) AND a.value IS NOT NULL THEN 'inf'::DOUBLE
            WHEN isinf(a.value) AND b.value IS NOT NULL THEN 0.0
            ELSE b.value / nullif(a.value, 0)
        END AS ratio,
        -- Relative variances (se / value)^2; NULL without a standard error.
        (a.se / nullif(a.value, 0)) ** 2 AS rv_a,
        (b.se / nullif(b.value, 0)) ** 2 AS rv_b,
        isinf(a.value) AND NOT isinf(b.value) AS only_a_infinite,
        isinf(b.value) AND NOT isinf(a.value) AS only_b_infinite,
        a.failed_queries AS a_failed_queries,
        b.failed_queries AS b_failed_queries
    FROM (SELECT * FROM long WHERE run_id = $run_a) AS a
    FULL JOIN (SELECT * FROM long WHERE run_id = $run_b) AS b
        USING (trial, phase, pipeline, metric)
),
per_trial AS (
    SELECT
        *,
        CASE WHEN isfinite(ratio) AND ratio > 0
            THEN ratio * exp(-log_ratio_half(rv_a, rv_b))
        END AS ratio_ci_low,
        CASE WHEN isfinite(ratio) AND ratio > 0
            THEN ratio * exp(log_ratio_half(rv_a, rv_b))
        END AS ratio_ci_high
    FROM paired
),
-- Over the trials both runs have (both sides present).
logs AS (
    SELECT
        phase,
        pipeline,
        metric,
        any_value(metric_order) AS metric_order,
        any_value(higher_is) AS higher_is,
        count(*) AS trials,
        avg(a_value) AS a_value,
        avg(b_value) AS b_value,
        avg(ln(ratio)) FILTER (WHERE isfinite(ratio) AND ratio > 0) AS log_mean,
        stddev_samp(ln(ratio)) FILTER (WHERE isfinite(ratio) AND ratio > 0) AS log_sd,
        count(*) FILTER (WHERE isfinite(ratio) AND ratio > 0) AS n,
        count(*) FILTER (WHERE only_a_infinite) AS a_infinite_trials,
        count(*) FILTER (WHERE only_b_infinite) AS b_infinite_trials,
        CAST(sum(a_failed_queries) AS BIGINT) AS a_failed_queries,
        CAST(sum(b_failed_queries) AS BIGINT) AS b_failed_queries
    FROM paired
    WHERE a_value IS NOT NULL AND b_value IS NOT NULL
    GROUP BY phase, pipeline, metric
    HAVING count(*) >= 2
),
over_trials AS (
    SELECT
        *,
        CASE
            WHEN b_infinite_trials > 0 AND a_infinite_trials = 0 AND n = 0 THEN 'inf'::DOUBLE
            WHEN a_infinite_trials > 0 AND b_infinite_trials = 0 AND n = 0 THEN 0.0
            ELSE exp(log_mean)
        END AS ratio,
        CASE WHEN n >= 2 THEN exp(log_mean - t975(n - 1) * log_sd / sqrt(n)) END
            AS ratio_ci_low,
        CASE WHEN n >= 2 THEN exp(log_mean + t975(n - 1) * log_sd / sqrt(n)) END
            AS ratio_ci_high
    FROM logs
),
combined AS (
    SELECT
        trial,
        1 AS trials,
        phase,
        pipeline,
        metric_order,
        metric,
        a_value,
        b_value,
        ratio,
        ratio_ci_low,
        ratio_ci_high,
        CASE WHEN ratio_ci_low IS NOT NULL THEN 'batch_means_delta' END AS ci_method,
        CASE
            WHEN only_b_infinite THEN 'slower'
            WHEN only_a_infinite THEN 'faster'
            ELSE ci_verdict(ratio_ci_low, ratio_ci_high, higher_is)
        END AS verdict,
        a_failed_queries,
        b_failed_queries
    FROM per_trial
    UNION ALL
    SELECT
        NULL,
        trials,
        phase,
        pipeline,
        metric_order,
        metric,
        a_value,
        b_value,
        ratio,
        ratio_ci_low,
        ratio_ci_high,
        CASE WHEN ratio_ci_low IS NOT NULL THEN 'log_t_over_trials' END,
        CASE
            WHEN b_infinite_trials > 0 AND a_infinite_trials = 0 THEN 'slower'
            WHEN a_infinite_trials > 0 AND b_infinite_trials = 0 THEN 'faster'
            ELSE ci_verdict(ratio_ci_low, ratio_ci_high, higher_is)
        END,
        a_failed_queries,
        b_failed_queries
    FROM over_trials
)
SELECT
    trial,
    trials,
    phase,
    pipeline,
    metric,
    a_value,
    b_value,
    ratio,
    ratio_ci_low,
    ratio_ci_high,
    ci_method,
    -- The issue's wording for ci_verdict's 'no measurable effect'.
    CASE WHEN verdict = 'no measurable effect' THEN 'no measurable change' ELSE verdict END
        AS verdict,
    a_failed_queries,
    b_failed_queries
FROM combined
ORDER BY phase DESC, pipeline, metric_order, trial NULLS LAST

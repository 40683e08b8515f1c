-- contention: each pipeline collocated vs alone, per (run_id, trial, phase, pipeline), where
-- phase is each non-solo phase the pipeline ran in: 'collocated' (every pipeline at once) and,
-- when the spec asks (collocation.subsets), each subset phase 'collocated:a+b' (those pipelines
-- only), every one paired with the same solo baseline. Consumers that want the one headline
-- row per pipeline filter phase = 'collocated'; `interference` lists them all.
--   throughput_ratio  collocated / solo queries_per_s (1 = unaffected, 0.5 = halved);
--   p50_slowdown, p99_slowdown  collocated / solo verdict percentile from `latency` (failures
--                     count as +inf there): 'inf' when only the collocated one is infinite,
--                     NULL when both are (nothing to compare);
--   solo_failed, collocated_failed  measured queries that did not complete ok, so drops stay
--                     visible next to the ratios.
-- Intervals (ci_method 'batch_means_delta'): the delta method on the log ratio, from the two
-- phases' batch-means standard errors: se(log R) = sqrt((se_c / c)^2 + (se_s / s)^2), with
-- Welch-Satterthwaite degrees of freedom (9 per phase), R * exp(+- t975(df) * se). NULL when a
-- side has no standard error (too few queries per batch, or infinite).
-- Verdicts (ci_verdict): 'no measurable effect' when the interval spans 1, else 'slower' or
-- 'faster'; an infinite p99 slowdown (the collocated phase lost over 1% of its queries, the
-- solo one did not) is 'slower' without an interval.
-- Energy comes from `energy_comparison` (energy per unit of work, per run and trial).
-- Rows come from the collocated phases; solo figures are NULL when a baseline is missing.
-- Energy (from `energy_comparison`, solo vs the full collocated phase) is on the 'collocated'
-- rows only: a subset phase did part of the work, so that ratio does not describe it.
CREATE OR REPLACE VIEW contention AS
WITH figures AS MATERIALIZED (
    SELECT * FROM phase_figures
),
paired AS (
    SELECT
        c.run_id,
        c.trial,
        c.phase,
        c.pipeline,
        s.queries_per_s AS solo_queries_per_s,
        c.queries_per_s AS collocated_queries_per_s,
        c.queries_per_s / nullif(s.queries_per_s, 0) AS throughput_ratio,
        -- Relative variances of each side (se / value)^2; NULL without a standard error.
        (s.queries_per_s_se / nullif(s.queries_per_s, 0)) ** 2 AS qps_rv_s,
        (c.queries_per_s_se / nullif(c.queries_per_s, 0)) ** 2 AS qps_rv_c,
        s.latency_p50_ms AS solo_p50_ms,
        c.latency_p50_ms AS collocated_p50_ms,
        CASE
            WHEN isinf(c.latency_p50_ms) AND isinf(s.latency_p50_ms) THEN NULL
            WHEN isinf(c.latency_p50_ms) AND s.latency_p50_ms IS NOT NULL THEN 'inf'::DOUBLE
            ELSE c.latency_p50_ms / nullif(s.latency_p50_ms, 0)
        END AS p50_slowdown,
        (s.latency_p50_se_ms / nullif(s.latency_p50_ms, 0)) ** 2 AS p50_rv_s,
        (c.latency_p50_se_ms / nullif(c.latency_p50_ms, 0)) ** 2 AS p50_rv_c,
        s.latency_p99_ms AS solo_p99_ms,
        c.latency_p99_ms AS collocated_p99_ms,
        CASE
            WHEN isinf(c.latency_p99_ms) AND isinf(s.latency_p99_ms) THEN NULL
            WHEN isinf(c.latency_p99_ms) AND s.latency_p99_ms IS NOT NULL THEN 'inf'::DOUBLE
            ELSE c.latency_p99_ms / nullif(s.latency_p99_ms, 0)
        END AS p99_slowdown,
        (s.latency_p99_se_ms / nullif(s.latency_p99_ms, 0)) ** 2 AS p99_rv_s,
        (c.latency_p99_se_ms / nullif(c.latency_p99_ms, 0)) ** 2 AS p99_rv_c,
        s.failed_queries AS solo_failed,
        c.failed_queries AS collocated_failed
    FROM figures AS c
    LEFT JOIN figures AS s
        ON c.run_id = s.run_id AND c.trial = s.trial AND c.pipeline = s.pipeline
        AND s.phase = 'solo'
    WHERE c.phase = 'collocated' OR c.phase LIKE 'collocated:%'
),
-- Half-widths of the log-ratio intervals (delta method, Welch df).
halves AS (
    SELECT
        *,
        log_ratio_half(qps_rv_s, qps_rv_c) AS qps_log_half,
        log_ratio_half(p50_rv_s, p50_rv_c) AS p50_log_half,
        log_ratio_half(p99_rv_s, p99_rv_c) AS p99_log_half
    FROM paired
),
bounded AS (
    SELECT
        *,
        CASE WHEN throughput_ratio > 0 THEN throughput_ratio * exp(-qps_log_half) END
            AS throughput_ratio_ci_low,
        CASE WHEN throughput_ratio > 0 THEN throughput_ratio * exp(qps_log_half) END
            AS throughput_ratio_ci_high,
        CASE WHEN isfinite(p50_slowdown) AND p50_slowdown > 0
            THEN p50_slowdown * exp(-p50_log_half)
        END AS p50_slowdown_ci_low,
        CASE WHEN isfinite(p50_slowdown) AND p50_slowdown > 0
            THEN p50_slowdown * exp(p50_log_half)
        END AS p50_slowdown_ci_high,
        CASE WHEN isfinite(p99_slowdown) AND p99_slowdown > 0
            THEN p99_slowdown * exp(-p99_log_half)
        END AS p99_slowdown_ci_low,
        CASE WHEN isfinite(p99_slowdown) AND p99_slowdown > 0
            THEN p99_slowdown * exp(p99_log_half)
        END AS p99_slowdown_ci_high
    FROM halves
)
SELECT
    b.run_id,
    b.trial,
    b.phase,
    b.pipeline,
    b.solo_queries_per_s,
    b.collocated_queries_per_s,
    b.throughput_ratio,
    b.throughput_ratio_ci_low,
    b.throughput_ratio_ci_high,
    b.solo_p50_ms,
    b.collocated_p50_ms,
    b.p50_slowdown,
    b.p50_slowdown_ci_low,
    b.p50_slowdown_ci_high,
    b.solo_p99_ms,
    b.collocated_p99_ms,
    b.p99_slowdown,
    b.p99_slowdown_ci_low,
    b.p99_slowdown_ci_high,
    CASE
        WHEN coalesce(
            b.throughput_ratio_ci_low, b.p50_slowdown_ci_low, b.p99_slowdown_ci_low
        ) IS NOT NULL THEN 'batch_means_delta'
    END AS ci_method,
    ci_verdict(b.throughput_ratio_ci_low, b.throughput_ratio_ci_high, 'faster')
        AS throughput_verdict,
    ci_verdict(b.p50_slowdown_ci_low, b.p50_slowdown_ci_high, 'slower') AS p50_verdict,
    CASE
        WHEN isinf(b.p99_slowdown) THEN 'slower'
        ELSE ci_verdict(b.p99_slowdown_ci_low, b.p99_slowdown_ci_high, 'slower')
    END AS p99_verdict,
    b.solo_failed,
    b.collocated_failed,
    e.energy_per_query_ratio,
    e.work_differs AS energy_work_differs,
    e.energy_source
FROM bounded AS b
LEFT JOIN energy_comparison AS e
    ON b.run_id = e.run_id AND b.trial = e.trial AND b.phase = 'collocated';

-- contention_by_run: the contention ratios over the trials of a run, per (run_id, phase,
-- pipeline) (phase as in `contention`).
-- Each ratio is the geometric mean of the per-trial ratios, with a Student-t 95% interval on
-- their logs, exponentiated (ci_method 'log_t_over_trials'): exp(mean +- t975(n - 1) * sd /
-- sqrt(n)) over the n >= 2 trials with a finite positive ratio (NULL otherwise). Verdicts as in
-- `contention`; failed query counts are summed over the trials.
CREATE OR REPLACE VIEW contention_by_run AS
WITH logs AS (
    SELECT
        run_id,
        phase,
        pipeline,
        count(*) AS trials,
        CAST(sum(solo_failed) AS BIGINT) AS solo_failed,
        CAST(sum(collocated_failed) AS BIGINT) AS collocated_failed,
        avg(ln(throughput_ratio)) FILTER (WHERE throughput_ratio > 0) AS qps_mean,
        stddev_samp(ln(throughput_ratio)) FILTER (WHERE throughput_ratio > 0) AS qps_sd,
        count(*) FILTER (WHERE throughput_ratio > 0) AS qps_n,
        avg(ln(p50_slowdown)) FILTER (WHERE p50_slowdown > 0 AND isfinite(p50_slowdown))
            AS p50_mean,
        stddev_samp(ln(p50_slowdown)) FILTER (
            WHERE p50_slowdown > 0 AND isfinite(p50_slowdown)
        ) AS p50_sd,
        count(*) FILTER (WHERE p50_slowdown > 0 AND isfinite(p50_slowdown)) AS p50_n,
        avg(ln(p99_slowdown)) FILTER (WHERE p99_slowdown > 0 AND isfinite(p99_slowdown))
            AS p99_mean,
        stddev_samp(ln(p99_slowdown)) FILTER (
            WHERE p99_slowdown > 0 AND isfinite(p99_slowdown)
        ) AS p99_sd,
        count(*) FILTER (WHERE p99_slowdown > 0 AND isfinite(p99_slowdown)) AS p99_n,
        count(*) FILTER (WHERE isinf(p99_slowdown)) AS p99_infinite_trials
    FROM contention
    GROUP BY run_id, phase, pipeline
),
bounded AS (
    SELECT
        *,
        CASE WHEN qps_n >= 2 THEN exp(qps_mean - t975(qps_n - 1) * qps_sd / sqrt(qps_n)) END
            AS throughput_ratio_ci_low,
        CASE WHEN qps_n >= 2 THEN exp(qps_mean + t975(qps_n - 1) * qps_sd / sqrt(qps_n)) END
            AS throughput_ratio_ci_high,
        CASE WHEN p50_n >= 2 THEN exp(p50_mean - t975(p50_n - 1) * p50_sd / sqrt(p50_n)) END
            AS p50_slowdown_ci_low,
        CASE WHEN p50_n >= 2 THEN exp(p50_mean + t975(p50_n - 1) * p50_sd / sqrt(p50_n)) END
            AS p50_slowdown_ci_high,
        CASE WHEN p99_n >= 2 THEN exp(p99_mean - t975(p99_n - 1) * p99_sd / sqrt(p99_n)) END
            AS p99_slowdown_ci_low,
        CASE WHEN p99_n >= 2 THEN exp(p99_mean + t975(p99_n - 1) * p99_sd / sqrt(p99_n)) END
            AS p99_slowdown_ci_high
    FROM logs
)
SELECT
    run_id,
    phase,
    pipeline,
    trials,
    exp(qps_mean) AS throughput_ratio,
    throughput_ratio_ci_low,
    throughput_ratio_ci_high,
    exp(p50_mean) AS p50_slowdown,
    p50_slowdown_ci_low,
    p50_slowdown_ci_high,
    exp(p99_mean) AS p99_slowdown,
    p99_slowdown_ci_low,
    p99_slowdown_ci_high,
    p99_infinite_trials,
    CASE
        WHEN coalesce(
            throughput_ratio_ci_low, p50_slowdown_ci_low, p99_slowdown_ci_low
        ) IS NOT NULL THEN 'log_t_over_trials'
    END AS ci_method,
    ci_verdict(throughput_ratio_ci_low, throughput_ratio_ci_high, 'faster')
        AS throughput_verdict,
    ci_verdict(p50_slowdown_ci_low, p50_slowdown_ci_high, 'slower') AS p50_verdict,
    ci_verdict(p99_slowdown_ci_low, p99_slowdown_ci_high, 'slower') AS p99_verdict,
    solo_failed,
    collocated_failed
FROM bounded;

-- latency: end-to-end latency per (run_id, trial, phase, pipeline), warm-up excluded, from the
-- per-query figures of `query_latency` (which defines them). Latency counts from the scheduled
-- arrival, never from issue, so a backlog cannot hide (no coordinated omission in open loop).
-- Every percentile is LoadGen's (loadgen_quantile: sorted[floor(N * p)], an observed value).
--   latency_p*_ms     the verdict: every measured query of the window; one that did not
--                     complete ok (error, dropped, timeout, not_issued) counts as +inf, as
--                     LoadGen sees an over-latency query. Survivors alone would make an
--                     overloaded run that dropped half its queries look fast.
--   completed_*_ms    the same over `ok` queries only, named so: what completed queries took.
--   from_issue_p*_ms  completed_ns - issued_ns of ok queries: in closed loop (single_stream,
--                     closed_loop) the schedule is "previous completion + think time", so this
--                     separates the harness's reaction time from the query's own latency.
--   issue_delay_p*_us issued_ns - scheduled_ns of every measured query with an issue time.
--   issue_delay_over_100us_share  the share of those issued more than 100 us late: how well
--                     the run kept its schedule (NULL: no query was issued).
-- Intervals (ci_method 'batch_means_10'): the measured queries in scheduled order are cut into
-- 10 consecutive batches; each verdict percentile is computed per batch, and the interval is
-- the full-sample value +- t975(9) * stddev(batch values) / sqrt(10), its low end truncated at
-- 0 (a latency cannot be negative; truncation keeps the coverage). An interval is NULL when a
-- batch is too small for its percentile (batch_min_size: p50 2, p90 10, p99 100, p99.9 1000
-- queries) or a batch value is infinite. latency_p50_se_ms / latency_p99_se_ms are the standard
-- errors, used by `contention`. ci_method is NULL when no interval could be computed.
CREATE OR REPLACE VIEW latency_from_rows AS
WITH quantiles AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        count(*) AS measured_queries,
        count(*) FILTER (WHERE status = 'ok') AS ok_queries,
        count(*) FILTER (WHERE status <> 'ok') AS failed_queries,
        loadgen_quantiles(verdict_ms, [0.5, 0.9, 0.95, 0.99, 0.999]) AS verdict,
        loadgen_quantiles(completed_ms, [0.5, 0.9, 0.99, 0.999]) AS completed,
        avg(completed_ms) AS completed_mean_ms,
        max(completed_ms) AS completed_max_ms,
        loadgen_quantiles(from_issue_ms, [0.5, 0.99]) AS from_issue,
        loadgen_quantiles(issue_delay_us, [0.5, 0.99]) AS issue_delay,
        count(*) FILTER (WHERE issue_delay_us > 100) / nullif(count(issue_delay_us), 0)
            AS issue_delay_over_100us_share
    FROM query_latency
    GROUP BY run_id, trial, phase, pipeline
),
whole AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        measured_queries,
        ok_queries,
        failed_queries,
        verdict[1] AS latency_p50_ms,
        verdict[2] AS latency_p90_ms,
        verdict[3] AS latency_p95_ms,
        verdict[4] AS latency_p99_ms,
        verdict[5] AS latency_p999_ms,
        completed[1] AS completed_p50_ms,
        completed[2] AS completed_p90_ms,
        completed[3] AS completed_p99_ms,
        completed[4] AS completed_p999_ms,
        completed_mean_ms,
        completed_max_ms,
        from_issue[1] AS from_issue_p50_ms,
        from_issue[2] AS from_issue_p99_ms,
        issue_delay[1] AS issue_delay_p50_us,
        issue_delay[2] AS issue_delay_p99_us,
        issue_delay_over_100us_share
    FROM quantiles
),
-- Each group's verdict latencies in scheduled order (query id breaks ties), to be cut into
-- batches (batch_slice: ntile's cut).
ordered AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        list(verdict_ms ORDER BY scheduled_ns, query_id) AS verdicts
    FROM query_latency
    GROUP BY run_id, trial, phase, pipeline
),
batches AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        batch,
        size,
        verdict[1] AS p50,
        verdict[2] AS p90,
        verdict[3] AS p95,
        verdict[4] AS p99,
        verdict[5] AS p999
    FROM (
        SELECT
            run_id,
            trial,
            phase,
            pipeline,
            b + 1 AS batch,
            list_count(batch_slice(verdicts, b)) AS size,
            loadgen_list_quantiles(batch_slice(verdicts, b), [0.5, 0.9, 0.95, 0.99, 0.999])
                AS verdict
        FROM (SELECT *, unnest(range(batch_count(verdicts))) AS b FROM ordered)
    )
),
spread AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        batch_se(
            stddev_samp(p50 ORDER BY batch), count(*), min(size), batch_min_size(0.5), bool_and(isfinite(p50))
        ) AS p50_se,
        batch_se(
            stddev_samp(p90 ORDER BY batch), count(*), min(size), batch_min_size(0.9), bool_and(isfinite(p90))
        ) AS p90_se,
        batch_se(
            stddev_samp(p95 ORDER BY batch), count(*), min(size), batch_min_size(0.95), bool_and(isfinite(p95))
        ) AS p95_se,
        batch_se(
            stddev_samp(p99 ORDER BY batch), count(*), min(size), batch_min_size(0.99), bool_and(isfinite(p99))
        ) AS p99_se,
        batch_se(
            stddev_samp(p999 ORDER BY batch),
            count(*),
            min(size),
            batch_min_size(0.999),
            bool_and(isfinite(p999))
        ) AS p999_se
    FROM batches
    GROUP BY run_id, trial, phase, pipeline
),
-- An interval only around a finite full-sample value.
finite_se AS (
    SELECT
        w.*,
        CASE WHEN isfinite(w.latency_p50_ms) THEN s.p50_se END AS p50_se,
        CASE WHEN isfinite(w.latency_p90_ms) THEN s.p90_se END AS p90_se,
        CASE WHEN isfinite(w.latency_p95_ms) THEN s.p95_se END AS p95_se,
        CASE WHEN isfinite(w.latency_p99_ms) THEN s.p99_se END AS p99_se,
        CASE WHEN isfinite(w.latency_p999_ms) THEN s.p999_se END AS p999_se
    FROM whole AS w
    JOIN spread AS s USING (run_id, trial, phase, pipeline)
)
SELECT
    run_id,
    trial,
    phase,
    pipeline,
    measured_queries,
    ok_queries,
    failed_queries,
    latency_p50_ms,
    latency_p90_ms,
    latency_p95_ms,
    latency_p99_ms,
    latency_p999_ms,
    at_least_zero(latency_p50_ms - t975(ci_batches() - 1) * p50_se) AS latency_p50_ci_low_ms,
    latency_p50_ms + t975(ci_batches() - 1) * p50_se AS latency_p50_ci_high_ms,
    at_least_zero(latency_p90_ms - t975(ci_batches() - 1) * p90_se) AS latency_p90_ci_low_ms,
    latency_p90_ms + t975(ci_batches() - 1) * p90_se AS latency_p90_ci_high_ms,
    at_least_zero(latency_p95_ms - t975(ci_batches() - 1) * p95_se) AS latency_p95_ci_low_ms,
    latency_p95_ms + t975(ci_batches() - 1) * p95_se AS latency_p95_ci_high_ms,
    at_least_zero(latency_p99_ms - t975(ci_batches() - 1) * p99_se) AS latency_p99_ci_low_ms,
    latency_p99_ms + t975(ci_batches() - 1) * p99_se AS latency_p99_ci_high_ms,
    at_least_zero(latency_p999_ms - t975(ci_batches() - 1) * p999_se) AS latency_p999_ci_low_ms,
    latency_p999_ms + t975(ci_batches() - 1) * p999_se AS latency_p999_ci_high_ms,
    p50_se AS latency_p50_se_ms,
    p99_se AS latency_p99_se_ms,
    CASE
        WHEN coalesce(p50_se, p90_se, p95_se, p99_se, p999_se) IS NOT NULL
            THEN 'batch_means_10'
    END AS ci_method,
    completed_p50_ms,
    completed_p90_ms,
    completed_p99_ms,
    completed_p999_ms,
    completed_mean_ms,
    completed_max_ms,
    from_issue_p50_ms,
    from_issue_p99_ms,
    issue_delay_p50_us,
    issue_delay_p99_us,
    issue_delay_over_100us_share
FROM finite_se;

-- Stored once per run at load (analysis/warehouse/stored_summaries.py), so reading `latency` scans a few rows
-- per run however many events the warehouse holds; `latency_from_rows` is the definition.
CREATE TABLE IF NOT EXISTS summary_latency AS SELECT * FROM latency_from_rows LIMIT 0;
CREATE OR REPLACE VIEW latency AS SELECT * FROM summary_latency;

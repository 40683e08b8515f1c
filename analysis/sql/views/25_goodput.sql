-- goodput: the share and the rate of queries that completed within the pipeline's `slo_ms`,
-- per (run_id, trial, phase, pipeline), warm-up excluded.
-- The denominator is every measured query of the window, whatever became of it: ok, error,
-- dropped, timeout and not_issued, exactly the N of the SLO verdict and of the verdict
-- percentiles (docs/design.md#how-the-figures-are-defined: "Verdict latency counts every query"): a query the harness refused or
-- never got to is a query the user did not get served in time. Per-query figures come from
-- `query_latency` (verdict_ms: completed_ns - scheduled_ns for ok queries, +inf otherwise), so
-- latency counts from the scheduled arrival and a failure is never "good".
--   slo_ms            the pipeline's loadgen.slo_ms (`pipeline_specs`); NULL without an SLO,
--                     and then every goodput figure is NULL (nothing defines "good");
--   queries           measured queries (the denominator); ok_queries, failed_queries beside it;
--   good_queries      ok queries with verdict_ms <= slo_ms;
--   late_queries      ok queries over the SLO (failed queries are neither good nor late);
--   goodput_share     good_queries / queries, with a Wilson score 95% interval
--                     (ci_method 'wilson_95', z = 1.96), which treats queries as independent
--                     draws: queueing makes neighbours' latencies correlated, so under load the
--                     interval is optimistic;
--   goodput_per_s     good_queries / the throughput window (`throughput.window_s`: first
--                     scheduled measured query to last completion), so it reads beside
--                     queries_per_s (the ok rate, also shown). NULL when nothing completed.
CREATE OR REPLACE VIEW goodput_from_rows AS
WITH counted AS (
    SELECT
        q.run_id,
        q.trial,
        q.phase,
        q.pipeline,
        any_value(s.slo_ms) AS slo_ms,
        count(*) AS queries,
        count(*) FILTER (WHERE q.status = 'ok') AS ok_queries,
        count(*) FILTER (WHERE q.status <> 'ok') AS failed_queries,
        count(*) FILTER (WHERE q.status = 'not_issued') AS not_issued,
        count(*) FILTER (WHERE q.verdict_ms <= s.slo_ms) AS good_queries,
        count(*) FILTER (WHERE q.status = 'ok' AND q.verdict_ms > s.slo_ms) AS late_queries
    FROM query_latency AS q
    LEFT JOIN pipeline_specs AS s ON q.run_id = s.run_id AND q.pipeline = s.pipeline
    GROUP BY q.run_id, q.trial, q.phase, q.pipeline
),
shares AS (
    SELECT
        *,
        CASE WHEN slo_ms IS NOT NULL THEN good_queries / queries::DOUBLE END AS p
    FROM counted
)
SELECT
    s.run_id,
    s.trial,
    s.phase,
    s.pipeline,
    s.slo_ms,
    s.queries,
    s.ok_queries,
    s.failed_queries,
    s.not_issued,
    CASE WHEN s.slo_ms IS NOT NULL THEN s.good_queries END AS good_queries,
    CASE WHEN s.slo_ms IS NOT NULL THEN s.late_queries END AS late_queries,
    s.p AS goodput_share,
    wilson95(s.p, s.queries, -1) AS goodput_share_ci_low,
    wilson95(s.p, s.queries, 1) AS goodput_share_ci_high,
    CASE WHEN s.p IS NOT NULL THEN 'wilson_95' END AS ci_method,
    t.window_s,
    CASE WHEN s.slo_ms IS NOT NULL THEN s.good_queries / nullif(t.window_s, 0) END
        AS goodput_per_s,
    t.queries_per_s
FROM shares AS s
LEFT JOIN throughput AS t
    ON s.run_id = t.run_id
    AND s.trial = t.trial
    AND s.phase = t.phase
    AND s.pipeline IS NOT DISTINCT FROM t.pipeline;

-- Stored once per run at load (analysis/warehouse/stored_summaries.py), so reading `goodput` scans a few rows
-- per run however many events the warehouse holds; `goodput_from_rows` is the definition.
CREATE TABLE IF NOT EXISTS summary_goodput AS SELECT * FROM goodput_from_rows LIMIT 0;
CREATE OR REPLACE VIEW goodput AS SELECT * FROM summary_goodput;

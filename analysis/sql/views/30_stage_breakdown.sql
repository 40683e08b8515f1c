-- stage_breakdown: where a pipeline's time goes, per (run_id, trial, phase, pipeline, stage).
-- Per visit: join wait = joined_ns - enqueued_ns (join stages only: from the first branch's
-- arrival to the merge, the wait for the slower sibling), queue wait = started_ns -
-- coalesce(joined_ns, enqueued_ns) (waiting for the stage thread), service time = finished_ns
-- - started_ns (the stage's own work). Along one path, issue delay + queue waits + join wait +
-- service times add up to the end-to-end latency. Percentiles are LoadGen's (loadgen_quantile).
-- Visits of warm-up queries are excluded (matched by query id); visits whose query id has no
-- queries row are kept. join_wait_* are NULL for a stage that never joins.
CREATE OR REPLACE VIEW stage_breakdown_from_rows AS
-- NOT MATERIALIZED: read twice (per_stage, revisited_queries) rather than copied once; the
-- second read keeps only the revisited stages' rows, and a copy of every visit cost more.
WITH measured AS NOT MATERIALIZED (
    SELECT
        e.*,
        (e.joined_ns - e.enqueued_ns) / 1e6 AS join_wait_ms,
        (e.started_ns - coalesce(e.joined_ns, e.enqueued_ns)) / 1e6 AS queue_wait_ms,
        (e.finished_ns - e.started_ns) / 1e6 AS service_ms
    FROM stage_events AS e
    ANTI JOIN (
        SELECT run_id, trial, phase, pipeline, query_id
        FROM queries
        WHERE warmup
    ) AS w
        ON e.run_id = w.run_id
        AND e.trial = w.trial
        AND e.phase = w.phase
        AND e.pipeline IS NOT DISTINCT FROM w.pipeline
        AND e.query_id = w.query_id
),
per_stage AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        stage,
        count(*) AS visits,
        -- Rows are unique per (query_id, stage, visit) (the run-directory contract), so a
        -- stage whose visits all carry one visit number was visited once per query: its
        -- distinct queries are its visits. Only a revisited stage (a loop) counts them below.
        min(visit) <> max(visit) AS revisited,
        count(*) FILTER (WHERE status = 'error') AS errors,
        avg(join_wait_ms) AS join_wait_mean_ms,
        loadgen_quantiles(join_wait_ms, [0.5, 0.99]) AS join_wait,
        avg(queue_wait_ms) AS queue_wait_mean_ms,
        loadgen_quantiles(queue_wait_ms, [0.5, 0.99]) AS queue_wait,
        avg(service_ms) AS service_mean_ms,
        loadgen_quantiles(service_ms, [0.5, 0.99]) AS service,
        sum(finished_ns - started_ns) / 1e9 AS busy_s
    FROM measured
    GROUP BY run_id, trial, phase, pipeline, stage
),
-- Distinct queries of the revisited stages only: counting them for every stage (a hash of
-- every visit's query id) was half the cost of this definition over 50M visits.
revisited_queries AS (
    SELECT
        m.run_id,
        m.trial,
        m.phase,
        m.pipeline,
        m.stage,
        CAST(list_unique(list(m.query_id)) AS BIGINT) AS queries
    FROM measured AS m
    SEMI JOIN (SELECT * FROM per_stage WHERE revisited) AS r
        ON m.run_id = r.run_id
        AND m.trial = r.trial
        AND m.phase = r.phase
        AND m.pipeline IS NOT DISTINCT FROM r.pipeline
        AND m.stage = r.stage
    GROUP BY m.run_id, m.trial, m.phase, m.pipeline, m.stage
)
SELECT
    p.run_id,
    p.trial,
    p.phase,
    p.pipeline,
    p.stage,
    p.visits,
    coalesce(r.queries, p.visits) AS queries,
    p.errors,
    p.join_wait_mean_ms,
    p.join_wait[1] AS join_wait_p50_ms,
    p.join_wait[2] AS join_wait_p99_ms,
    p.queue_wait_mean_ms,
    p.queue_wait[1] AS queue_wait_p50_ms,
    p.queue_wait[2] AS queue_wait_p99_ms,
    p.service_mean_ms,
    p.service[1] AS service_p50_ms,
    p.service[2] AS service_p99_ms,
    p.busy_s
FROM per_stage AS p
LEFT JOIN revisited_queries AS r
    ON p.run_id = r.run_id
    AND p.trial = r.trial
    AND p.phase = r.phase
    AND p.pipeline IS NOT DISTINCT FROM r.pipeline
    AND p.stage = r.stage;

-- Stored once per run at load (analysis/warehouse/stored_summaries.py), so reading `stage_breakdown` scans a few rows
-- per run however many events the warehouse holds; `stage_breakdown_from_rows` is the definition.
CREATE TABLE IF NOT EXISTS summary_stage_breakdown AS SELECT * FROM stage_breakdown_from_rows LIMIT 0;
CREATE OR REPLACE VIEW stage_breakdown AS SELECT * FROM summary_stage_breakdown;

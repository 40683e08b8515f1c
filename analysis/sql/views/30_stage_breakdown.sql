-- stage_breakdown: where a pipeline's time goes, per (run_id, trial, phase, pipeline, stage).
-- queue wait = started_ns - enqueued_ns (waiting for the stage thread), service time =
-- finished_ns - started_ns (the stage's own work). Visits of warm-up queries are excluded
-- (matched by query id); visits whose query id has no queries row are kept.
CREATE OR REPLACE VIEW stage_breakdown AS
WITH measured AS (
    SELECT e.*
    FROM stage_events AS e
    ANTI JOIN (
        SELECT run_id, trial, phase, pipeline, query_id FROM queries WHERE warmup
    ) AS w
        ON e.run_id = w.run_id
        AND e.trial = w.trial
        AND e.phase = w.phase
        AND e.pipeline IS NOT DISTINCT FROM w.pipeline
        AND e.query_id = w.query_id
)
SELECT
    run_id,
    trial,
    phase,
    pipeline,
    stage,
    count(*) AS visits,
    count(DISTINCT query_id) AS queries,
    count(*) FILTER (WHERE status = 'error') AS errors,
    avg((started_ns - enqueued_ns) / 1e6) AS queue_wait_mean_ms,
    quantile_cont((started_ns - enqueued_ns) / 1e6, 0.5) AS queue_wait_p50_ms,
    quantile_cont((started_ns - enqueued_ns) / 1e6, 0.99) AS queue_wait_p99_ms,
    avg((finished_ns - started_ns) / 1e6) AS service_mean_ms,
    quantile_cont((finished_ns - started_ns) / 1e6, 0.5) AS service_p50_ms,
    quantile_cont((finished_ns - started_ns) / 1e6, 0.99) AS service_p99_ms,
    sum(finished_ns - started_ns) / 1e9 AS busy_s
FROM measured
GROUP BY run_id, trial, phase, pipeline, stage;

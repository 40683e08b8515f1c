-- visits: the stage visits the trace draws, one slice each: the queries kept by
-- traced_queries.sql (query_id <= last_kept_query_id of their track), with the query's
-- warm-up flag and status from `queries` (NULL when the query has no queries row). Times stay
-- integer nanoseconds of the run's monotonic clock; the trace divides by 1000 (microseconds).
-- Ordered by query and start, so consecutive rows of one query are the hops of its flow.
WITH kept AS (
    -- One row per track: $tracks is traced_queries.sql's result, passed back by the caller.
    SELECT track.trial, track.phase, track.pipeline, track.last_kept_query_id
    FROM (SELECT unnest($tracks) AS track)
)
SELECT
    e.trial,
    e.phase,
    e.pipeline,
    e.query_id,
    e.stage,
    e.visit,
    e.enqueued_ns,
    e.joined_ns,
    e.started_ns,
    e.finished_ns,
    e.status,
    e.tokens,
    q.warmup,
    q.status AS query_status
FROM stage_events AS e
SEMI JOIN kept AS k
    ON e.trial = k.trial
    AND e.phase = k.phase
    AND e.pipeline IS NOT DISTINCT FROM k.pipeline
    AND e.query_id <= k.last_kept_query_id
LEFT JOIN queries AS q
    ON q.run_id = e.run_id
    AND q.trial = e.trial
    AND q.phase = e.phase
    AND q.pipeline IS NOT DISTINCT FROM e.pipeline
    AND q.query_id = e.query_id
WHERE e.run_id = $run_id
ORDER BY e.pipeline, e.phase, e.trial, e.query_id, e.started_ns, e.visit;

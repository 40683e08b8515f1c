-- operators: the operator spans (`operator_spans`, written only when a model stage profiled)
-- of the queries the trace keeps (traced_queries.sql's tracks, as in visits.sql), the
-- profiler's `window` rows included (each encloses its visit's operators). Ordered by start, longest first, so an enclosing span comes before the
-- spans it contains.
WITH kept AS (
    -- One row per track: $tracks is traced_queries.sql's result, passed back by the caller.
    SELECT track.trial, track.phase, track.pipeline, track.last_kept_query_id
    FROM (SELECT unnest($tracks) AS track)
)
SELECT
    o.trial,
    o.phase,
    o.pipeline,
    o.query_id,
    o.stage,
    o.visit,
    o.operator,
    o.start_ns,
    o.end_ns,
    o.device_type,
    o.device_index,
    o.thread_id,
    o.self_cpu_ns,
    o.input_shapes
FROM operator_spans AS o
SEMI JOIN kept AS k
    ON o.trial = k.trial
    AND o.phase = k.phase
    AND o.pipeline IS NOT DISTINCT FROM k.pipeline
    AND o.query_id <= k.last_kept_query_id
WHERE o.run_id = $run_id
ORDER BY o.pipeline, o.phase, o.trial, o.stage, o.start_ns, o.end_ns DESC;

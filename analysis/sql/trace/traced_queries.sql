-- traced_queries: which queries the trace draws. Big runs would make a trace no viewer opens,
-- so each (trial, phase, pipeline) keeps its first $max_queries query ids (in query-id order,
-- which is issue order; warm-up queries included and flagged, they are part of what ran).
-- One row per (trial, phase, pipeline): how many query ids had stage events, how many are
-- kept, and the largest kept id (the trace's metadata says when a track was capped).
WITH ids AS (
    SELECT DISTINCT trial, phase, pipeline, query_id
    FROM stage_events
    WHERE run_id = $run_id
),
ranked AS (
    SELECT
        *,
        row_number() OVER (PARTITION BY trial, phase, pipeline ORDER BY query_id) AS position
    FROM ids
)
SELECT
    trial,
    phase,
    pipeline,
    count(*) AS queries,
    count(*) FILTER (WHERE position <= $max_queries) AS kept,
    max(query_id) FILTER (WHERE position <= $max_queries) AS last_kept_query_id
FROM ranked
GROUP BY trial, phase, pipeline
ORDER BY pipeline, phase, trial;

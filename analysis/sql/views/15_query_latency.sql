-- query_latency: one row per measured (non-warm-up) query with its latencies, the one place
-- they are defined; `latency`, the run summary and early stopping all read it.
--   verdict_ms      completed_ns - scheduled_ns for an `ok` query, +inf for any other (error,
--                   dropped, timeout, not_issued): LoadGen's over-latency query. Counting from
--                   the schedule, not the issue, keeps coordinated omission out in open loop.
--   completed_ms    the same for ok queries only (NULL otherwise): what completed queries took.
--   from_issue_ms   completed_ns - issued_ns of ok queries: closed loop schedules each query at
--                   "previous completion + think time", so this is the query's own latency
--                   without the harness's reaction time.
--   issue_delay_us  issued_ns - scheduled_ns (NULL when the query was never issued).
CREATE OR REPLACE VIEW query_latency AS
SELECT
    run_id,
    trial,
    phase,
    pipeline,
    query_id,
    scheduled_ns,
    status,
    CASE
        WHEN status = 'ok' THEN (completed_ns - scheduled_ns) / 1e6 ELSE 'inf'::DOUBLE
    END AS verdict_ms,
    CASE WHEN status = 'ok' THEN (completed_ns - scheduled_ns) / 1e6 END AS completed_ms,
    CASE WHEN status = 'ok' THEN (completed_ns - issued_ns) / 1e6 END AS from_issue_ms,
    (issued_ns - scheduled_ns) / 1e3 AS issue_delay_us
FROM queries
WHERE NOT warmup;

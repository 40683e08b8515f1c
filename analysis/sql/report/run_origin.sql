-- run_origin: the run's first and last recorded instants on its monotonic clock (ns), over
-- queries (scheduled and completed) and every sampler's rows, so the report's timeline plots
-- share one time axis starting at 0.
SELECT min(first_ns) AS origin_ns, max(last_ns) AS end_ns
FROM (
    SELECT min(scheduled_ns) AS first_ns, max(coalesce(completed_ns, issued_ns, scheduled_ns))
        AS last_ns
    FROM queries WHERE run_id = $run_id
    UNION ALL
    SELECT min(ts_ns), max(ts_ns) FROM host_samples WHERE run_id = $run_id
    UNION ALL
    SELECT min(ts_ns), max(ts_ns) FROM gpu_samples WHERE run_id = $run_id
    UNION ALL
    SELECT min(ts_ns), max(ts_ns) FROM server_samples WHERE run_id = $run_id
);

-- windows: the run's load windows (`load_windows`: measured queries only, warm-up and drain
-- outside), in seconds from $origin_ns, for marking them on the timeline plot.
SELECT
    trial,
    phase,
    pipeline,
    (window_start_ns - $origin_ns) / 1e9 AS start_s,
    (window_end_ns - $origin_ns) / 1e9 AS end_s
FROM load_windows
WHERE run_id = $run_id
ORDER BY start_s;

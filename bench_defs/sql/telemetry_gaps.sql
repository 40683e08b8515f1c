-- Telemetry gaps inside the load windows of one run (the `validity` check): per load window
-- (`load_windows`: one per solo baseline, one per collocated phase) and per sampled series
-- (the host sampler, each GPU), the longest stretch without a sample, the window's own start
-- and end counted as edges so a series must cover the whole window. Rows only for gaps longer
-- than $periods sampling periods.
-- Each window is taken on its own: the solo baselines of one trial share the phase name
-- 'solo', and the samplers restart between them, so the time BETWEEN two baselines (no load,
-- no measurement) must not count as a gap.
-- Parameters: $run, $host_period_ms, $host_enabled, $gpu_period_ms, $periods.
WITH windows AS (
    SELECT
        trial,
        phase,
        pipeline,
        window_start_ns AS start_ns,
        window_end_ns AS end_ns
    FROM load_windows
    WHERE run_id = $run
),
series AS (
    SELECT trial, phase, 'host' AS series, ts_ns, $host_period_ms AS period_ms
    FROM host_samples
    WHERE run_id = $run AND scope = 'host' AND $host_enabled
    UNION ALL
    SELECT trial, phase, 'gpu ' || gpu, ts_ns, $gpu_period_ms
    FROM gpu_samples
    WHERE run_id = $run
),
-- The series each window should have: those sampled at all in its (trial, phase).
present AS (
    SELECT DISTINCT w.trial, w.phase, w.pipeline, w.start_ns, w.end_ns, s.series, s.period_ms
    FROM windows AS w
    JOIN series AS s ON s.trial = w.trial AND s.phase = w.phase
),
points AS (
    SELECT p.trial, p.phase, p.pipeline, p.series, p.period_ms, s.ts_ns
    FROM present AS p
    JOIN series AS s
        ON s.trial = p.trial AND s.phase = p.phase AND s.series = p.series
        AND s.ts_ns BETWEEN p.start_ns AND p.end_ns
    UNION ALL  -- the window's edges
    SELECT trial, phase, pipeline, series, period_ms, start_ns FROM present
    UNION ALL
    SELECT trial, phase, pipeline, series, period_ms, end_ns FROM present
),
gaps AS (
    SELECT
        trial,
        phase,
        pipeline,
        series,
        period_ms,
        ts_ns - lag(ts_ns) OVER (
            PARTITION BY trial, phase, pipeline, series ORDER BY ts_ns
        ) AS gap_ns
    FROM points
)
SELECT
    trial,
    phase,
    pipeline,
    series,
    max(gap_ns) / 1e6 AS max_gap_ms,
    any_value(period_ms) AS period_ms
FROM gaps
GROUP BY trial, phase, pipeline, series
HAVING max(gap_ns) / 1e6 > $periods * any_value(period_ms)
ORDER BY trial, phase, pipeline, series;

-- energy: joules each device used over a LOAD WINDOW, per (run_id, trial, phase, pipeline, device).
-- device is 'host' (host_samples rows with scope = 'host') or 'gpu:<index>' (gpu_samples).
-- Samplers start when the workers are spawned and stop after the drain, so a series also spans
-- model loading, warm-up and drain; only the load window counts here:
--   solo phase        one window per (run_id, trial, pipeline): first scheduled_ns to last
--                     coalesce(completed_ns, issued_ns, scheduled_ns) of that pipeline's
--                     non-warm-up queries; pipeline is that baseline;
--   collocated phase  one window per (run_id, trial) spanning every pipeline's non-warm-up
--                     queries; pipeline is NULL (a shared device).
-- energy_j in the files is cumulative since its sampler started. E(t) is that counter linearly
-- interpolated between the last sample at or before t and the first at or after t (rows that
-- name an energy_source only), and energy_j = E(window_end) - E(window_start). A window thus takes
-- the samples it contains plus one on each side: solo rows belong to the baseline whose window
-- contains them, never to the nearest one. A bracketing pair whose value drops (two samplers of
-- consecutive solo baselines, each counting from 0) is not used.
-- When an edge is not bracketed (no sample at or before the start, none at or after the end, or
-- a drop), that edge is clamped to the nearest sample inside the window and window_covered is
-- false: energy_j then covers measured_s < window_s only; mean_power_w = energy_j / measured_s
-- is the mean power over what was measured either way. energy_j is NULL, never invented, unless the two measured points are distinct
-- samples' times (at least one sample <= end and one >= start, spanning a positive time);
-- energy_source lists every source of the samples used ('+'-joined, e.g. a counter that fell
-- back to power integration) and is NULL with energy_j. A device appears for every window of a
-- phase it has rows in; a phase without non-warm-up queries has no window and no row.
CREATE OR REPLACE VIEW energy AS
WITH device_rows AS (
    SELECT run_id, trial, phase, 'host' AS device, ts_ns, energy_j, energy_source
    FROM host_samples
    WHERE scope = 'host'
    UNION ALL
    SELECT run_id, trial, phase, 'gpu:' || gpu AS device, ts_ns, energy_j, energy_source
    FROM gpu_samples
),
energy_rows AS (
    SELECT * FROM device_rows WHERE energy_source IS NOT NULL AND energy_j IS NOT NULL
),
windows AS (
    SELECT
        run_id,
        trial,
        phase,
        CASE WHEN phase = 'solo' THEN pipeline END AS pipeline,
        min(scheduled_ns) AS window_start_ns,
        max(coalesce(completed_ns, issued_ns, scheduled_ns)) AS window_end_ns
    FROM queries
    WHERE NOT warmup
    GROUP BY run_id, trial, phase, CASE WHEN phase = 'solo' THEN pipeline END
),
series AS (
    SELECT w.*, d.device
    FROM windows AS w
    JOIN (SELECT DISTINCT run_id, trial, phase, device FROM device_rows) AS d
        ON w.run_id = d.run_id AND w.trial = d.trial AND w.phase = d.phase
),
-- The samples around and inside each window: p.t is a time (ns), p.e a cumulative energy (J).
edges AS (
    SELECT
        s.run_id,
        s.trial,
        s.phase,
        s.pipeline,
        s.device,
        s.window_start_ns,
        s.window_end_ns,
        arg_max({'t': r.ts_ns, 'e': r.energy_j}, r.ts_ns)
            FILTER (WHERE r.ts_ns <= s.window_start_ns) AS before_start,
        arg_min({'t': r.ts_ns, 'e': r.energy_j}, r.ts_ns)
            FILTER (WHERE r.ts_ns >= s.window_start_ns) AS after_start,
        arg_max({'t': r.ts_ns, 'e': r.energy_j}, r.ts_ns)
            FILTER (WHERE r.ts_ns <= s.window_end_ns) AS before_end,
        arg_min({'t': r.ts_ns, 'e': r.energy_j}, r.ts_ns)
            FILTER (WHERE r.ts_ns >= s.window_end_ns) AS after_end,
        count(r.ts_ns) FILTER (
            WHERE r.ts_ns BETWEEN s.window_start_ns AND s.window_end_ns
        ) AS samples
    FROM series AS s
    LEFT JOIN energy_rows AS r
        ON s.run_id = r.run_id AND s.trial = r.trial AND s.phase = r.phase
        AND s.device = r.device
    GROUP BY ALL
),
covered AS (
    SELECT
        *,
        coalesce(after_start.e >= before_start.e, false) AS start_covered,
        coalesce(after_end.e >= before_end.e, false) AS end_covered
    FROM edges
),
-- Each edge: interpolated at the window edge when bracketed, else the nearest sample inside.
points AS (
    SELECT
        *,
        CASE
            WHEN start_covered THEN window_start_ns
            WHEN after_start.t <= window_end_ns THEN after_start.t
        END AS measured_start_ns,
        CASE
            WHEN start_covered AND after_start.t = before_start.t THEN before_start.e
            WHEN start_covered THEN before_start.e + (after_start.e - before_start.e)
                * (window_start_ns - before_start.t) / (after_start.t - before_start.t)
            WHEN after_start.t <= window_end_ns THEN after_start.e
        END AS start_e,
        CASE
            WHEN end_covered THEN window_end_ns
            WHEN before_end.t >= window_start_ns THEN before_end.t
        END AS measured_end_ns,
        CASE
            WHEN end_covered AND after_end.t = before_end.t THEN before_end.e
            WHEN end_covered THEN before_end.e + (after_end.e - before_end.e)
                * (window_end_ns - before_end.t) / (after_end.t - before_end.t)
            WHEN before_end.t >= window_start_ns THEN before_end.e
        END AS end_e,
        CASE WHEN start_covered THEN before_start.t ELSE after_start.t END AS first_used_ns,
        CASE WHEN end_covered THEN after_end.t ELSE before_end.t END AS last_used_ns
    FROM covered
),
measured AS (
    SELECT
        p.run_id,
        p.trial,
        p.phase,
        p.pipeline,
        p.device,
        p.window_start_ns,
        p.window_end_ns,
        p.start_covered AND p.end_covered AS window_covered,
        p.samples,
        CASE WHEN p.measured_start_ns < p.measured_end_ns THEN p.end_e - p.start_e END
            AS energy_j,
        CASE WHEN p.measured_start_ns < p.measured_end_ns
            THEN (p.measured_end_ns - p.measured_start_ns) / 1e9
        END AS measured_s,
        (
            SELECT string_agg(DISTINCT r.energy_source, '+' ORDER BY r.energy_source)
            FROM energy_rows AS r
            WHERE r.run_id = p.run_id AND r.trial = p.trial AND r.phase = p.phase
                AND r.device = p.device
                AND r.ts_ns BETWEEN p.first_used_ns AND p.last_used_ns
        ) AS sources
    FROM points AS p
)
SELECT
    run_id,
    trial,
    phase,
    pipeline,
    device,
    CASE WHEN energy_j IS NOT NULL THEN sources END AS energy_source,
    energy_j,
    energy_j / nullif(measured_s, 0) AS mean_power_w,
    window_start_ns,
    window_end_ns,
    (window_end_ns - window_start_ns) / 1e9 AS window_s,
    window_covered,
    measured_s,
    samples
FROM measured;

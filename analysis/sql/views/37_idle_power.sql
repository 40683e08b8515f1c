-- idle_power: the measured idle baseline, per (run_id, device).
-- When the spec sets telemetry.idle_baseline_s > 0, the launcher runs the samplers alone (no
-- workers) for that long before the first phase; their rows carry phase = 'idle', trial = 0,
-- pipeline NULL. Those rows are read here and nowhere else: they form no load window.
--   idle_s        the time spanned by the device's idle samples (with or without energy);
--   idle_power_w  energy delta / time span of the usable idle samples, summed over drop-free
--                 segments (see `energy_samples`); NULL without energy (no source, or fewer
--                 than two usable samples), never invented;
--   energy_source what measured it ('+'-joined), NULL with idle_power_w.
-- `energy` subtracts idle_power_w * window_s to give the dynamic (load-caused) energy.
CREATE OR REPLACE VIEW idle_power AS
WITH segments AS (
    SELECT
        run_id,
        device,
        segment,
        max(energy_j) - min(energy_j) AS delta_j,  -- cumulative: max is last, min is first
        (max(ts_ns) - min(ts_ns)) / 1e9 AS span_s
    FROM energy_samples
    WHERE phase = 'idle' AND usable
    GROUP BY run_id, device, segment
),
power AS (
    SELECT run_id, device, sum(delta_j) / nullif(sum(span_s), 0) AS idle_power_w
    FROM segments
    GROUP BY run_id, device
),
spans AS (
    SELECT
        run_id,
        device,
        (max(ts_ns) - min(ts_ns)) / 1e9 AS idle_s,
        string_agg(DISTINCT energy_source, '+' ORDER BY energy_source) AS sources
    FROM energy_samples
    WHERE phase = 'idle'
    GROUP BY run_id, device
)
SELECT
    s.run_id,
    s.device,
    p.idle_power_w,
    s.idle_s,
    CASE WHEN p.idle_power_w IS NOT NULL THEN s.sources END AS energy_source
FROM spans AS s
LEFT JOIN power AS p ON s.run_id = p.run_id AND s.device = p.device;

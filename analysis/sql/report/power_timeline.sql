-- power_timeline: power draw over time per device, for the report's timeline plot.
-- gpu:<index>  the sampled power_w of gpu_samples (NVML board power);
-- host         the slope of the host's cumulative energy_j between consecutive samples of one
--              sampler's series (a fall in energy_j starts a new series: `energy_samples`'
--              segments), so a model_estimate or RAPL figure is drawn as watts.
-- energy_source names where the figure comes from; devices without any source are absent
-- (no energy is never drawn as zero). t_s counts seconds from $origin_ns.
WITH host AS (
    SELECT
        trial,
        phase,
        device,
        ts_ns,
        energy_source,
        (energy_j - lag(energy_j) OVER w) / ((ts_ns - lag(ts_ns) OVER w) / 1e9) AS power_w
    FROM energy_samples
    WHERE run_id = $run_id AND usable AND device = 'host'
    WINDOW w AS (PARTITION BY trial, phase, device, segment ORDER BY ts_ns)
)
SELECT trial, phase, device, (ts_ns - $origin_ns) / 1e9 AS t_s, power_w, energy_source
FROM host
WHERE power_w IS NOT NULL AND isfinite(power_w)
UNION ALL
SELECT
    trial,
    phase,
    'gpu:' || gpu AS device,
    (ts_ns - $origin_ns) / 1e9 AS t_s,
    power_w,
    coalesce(energy_source, 'nvml_power') AS energy_source
FROM gpu_samples
WHERE run_id = $run_id AND power_w IS NOT NULL
ORDER BY device, t_s;

-- counters: the trace's counter tracks, one row per sample: (track, pipeline, value), where
-- pipeline names the pipeline process a per-process series belongs to (NULL: device-wide).
--   gpu<i> power_w / sm_util_pct / mem_util_pct   gpu_samples (NVML)
--   gpu<i> pid <pid> sm_util_pct                  gpu_process_samples, in its pipeline's track
--   host cpu_util_pct                             host_samples, scope 'host' (% of all cores)
--   cpu_util_pct                                  host_samples, scope 'process' (% of one core)
--   host power_w (<source>)                       slope of the host's cumulative energy_j
--                                                 within one sampler series (energy_samples)
-- Samplers run per (trial, phase), so a track never mixes two phases' series at one instant.
WITH host_power AS (
    SELECT
        trial,
        phase,
        ts_ns,
        energy_source,
        (energy_j - lag(energy_j) OVER w) / ((ts_ns - lag(ts_ns) OVER w) / 1e9) AS power_w
    FROM energy_samples
    WHERE run_id = $run_id AND usable AND device = 'host'
    WINDOW w AS (PARTITION BY trial, phase, device, segment ORDER BY ts_ns)
)
SELECT trial, phase, NULL AS pipeline, 'gpu' || gpu || ' power_w' AS track, ts_ns,
    power_w AS value
FROM gpu_samples
WHERE run_id = $run_id AND power_w IS NOT NULL
UNION ALL
SELECT trial, phase, NULL, 'gpu' || gpu || ' sm_util_pct', ts_ns, sm_util
FROM gpu_samples
WHERE run_id = $run_id AND sm_util IS NOT NULL
UNION ALL
SELECT trial, phase, NULL, 'gpu' || gpu || ' mem_util_pct', ts_ns, mem_util
FROM gpu_samples
WHERE run_id = $run_id AND mem_util IS NOT NULL
UNION ALL
SELECT trial, phase, pipeline, 'gpu' || gpu || ' pid ' || pid || ' sm_util_pct', ts_ns, sm_util
FROM gpu_process_samples
WHERE run_id = $run_id AND sm_util IS NOT NULL
UNION ALL
SELECT trial, phase, NULL, 'host cpu_util_pct', ts_ns, cpu_util
FROM host_samples
WHERE run_id = $run_id AND scope = 'host' AND cpu_util IS NOT NULL
UNION ALL
SELECT trial, phase, pipeline, 'cpu_util_pct', ts_ns, cpu_util
FROM host_samples
WHERE run_id = $run_id AND scope = 'process' AND cpu_util IS NOT NULL
UNION ALL
SELECT trial, phase, NULL, 'host power_w (' || energy_source || ')', ts_ns, power_w
FROM host_power
WHERE power_w IS NOT NULL AND isfinite(power_w)
ORDER BY track, ts_ns;

-- energy_samples: every device sample that can carry energy, one row per (sample, device), with
-- the drop-free stretch it belongs to. Read by `idle_power` and `energy`.
-- device is 'host' (host_samples rows with scope = 'host') or 'gpu:<index>' (gpu_samples).
-- energy_j is cumulative since its sampler started, so it never falls within one sampler's
-- series; a fall means another sampler's series began (each counts from 0: consecutive solo
-- baselines of a trial share one (trial, phase) and one device name). `segment` numbers those
-- stretches per (run_id, trial, phase, device) in time order, starting at 0, so a difference of
-- energy is only ever taken inside one segment. usable: the row has an energy value and names
-- its source (a value without a source is no energy figure); segment is NULL when not usable.
CREATE OR REPLACE VIEW energy_samples AS
WITH device_rows AS (
    SELECT run_id, trial, phase, 'host' AS device, ts_ns, energy_j, energy_source
    FROM host_samples
    WHERE scope = 'host'
    UNION ALL
    SELECT run_id, trial, phase, 'gpu:' || gpu AS device, ts_ns, energy_j, energy_source
    FROM gpu_samples
),
usable AS (
    SELECT
        *,
        lag(energy_j) OVER (
            PARTITION BY run_id, trial, phase, device ORDER BY ts_ns
        ) AS previous_j
    FROM device_rows
    WHERE energy_source IS NOT NULL AND energy_j IS NOT NULL
)
SELECT
    run_id,
    trial,
    phase,
    device,
    ts_ns,
    energy_j,
    energy_source,
    true AS usable,
    CAST(sum(CASE WHEN energy_j < previous_j THEN 1 ELSE 0 END) OVER (
        PARTITION BY run_id, trial, phase, device ORDER BY ts_ns
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    ) AS INTEGER) AS segment
FROM usable
UNION ALL
SELECT
    run_id,
    trial,
    phase,
    device,
    ts_ns,
    energy_j,
    energy_source,
    false AS usable,
    CAST(NULL AS INTEGER) AS segment
FROM device_rows
WHERE energy_source IS NULL OR energy_j IS NULL;

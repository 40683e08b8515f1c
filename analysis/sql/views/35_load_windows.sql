-- load_windows: the one definition of a LOAD WINDOW, read by `energy` and `host_load`.
-- One row per window:
--   solo phase        one per (run_id, trial, pipeline): that pipeline's baseline;
--   collocated phase  one per (run_id, trial), pipeline NULL: every pipeline at once;
--   subset phases     `collocated:a+b` (collocation.subsets), one per (run_id, trial, phase),
--                     pipeline NULL: the pipelines of that subset at once. So `energy`,
--                     `energy_split`, `perf_per_watt` and `host_load` have a row per subset
--                     phase too; `energy_comparison` stays solo vs the full collocated phase.
-- window_start_ns is the first scheduled_ns of the measured (non-warm-up) queries and
-- window_end_ns the last coalesce(completed_ns, issued_ns, scheduled_ns) among them, so every
-- scheduled arrival counts: a dropped query by its refusal, a timed-out one by its issue, a
-- `not_issued` one by its schedule. Model loading, warm-up and drain lie outside.
-- Only the solo and collocated phases (full or subset) form windows: samples of the idle
-- baseline (phase 'idle', taken before the first phase with no workers running) never do.
CREATE OR REPLACE VIEW load_windows_from_rows AS
SELECT
    run_id,
    trial,
    phase,
    CASE WHEN phase = 'solo' THEN pipeline END AS pipeline,
    min(scheduled_ns) AS window_start_ns,
    max(coalesce(completed_ns, issued_ns, scheduled_ns)) AS window_end_ns,
    (max(coalesce(completed_ns, issued_ns, scheduled_ns)) - min(scheduled_ns)) / 1e9 AS window_s
FROM queries
WHERE NOT warmup AND (phase IN ('solo', 'collocated') OR phase LIKE 'collocated:%')
GROUP BY run_id, trial, phase, CASE WHEN phase = 'solo' THEN pipeline END;

-- Stored once per run at load (analysis/warehouse/stored_summaries.py), so reading `load_windows` scans a few rows
-- per run however many events the warehouse holds; `load_windows_from_rows` is the definition.
CREATE TABLE IF NOT EXISTS summary_load_windows AS SELECT * FROM load_windows_from_rows LIMIT 0;
CREATE OR REPLACE VIEW load_windows AS SELECT * FROM summary_load_windows;

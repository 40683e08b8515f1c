-- One A/B segment's figures (collobench ab): a segment is an ordinary short run, loaded alone
-- into an in-memory database (analysis/reports/ab_segment.py). One row per (pipeline, metric)
-- of its single phase, the figures `run_history` judges (queries_per_s, latency_p50_ms,
-- latency_p99_ms), plus ttft_p50_ms for a pipeline with a generation stage (the `tokens` view,
-- its first such stage by name), each with what the blocks' spoiled-check and the arms'
-- fingerprint comparison need:
--   calibration_score  the machine's measured speed on the pipeline's cores in this phase
--                      (run_history's: geometric mean of the before and after cpu_loop scores);
--   foreign_cpu_cores  the most CPU anything outside the benchmark held in the phase's load
--                      windows (`host_load`; NULL without host samples);
--   machine_class and the code and environment fingerprints, as run_history names them.
-- A segment whose run failed has no rows (run_history keeps ok runs only): the block is spoiled.
WITH figures AS (
    SELECT
        run_id, trial, phase, pipeline, metric, metric_order, higher_is_better, value,
        calibration_score, machine_class, spec_hash, host, collobench_version, git_commit,
        git_dirty, python_version, torch_version, transformers_version, cuda_version,
        driver_version, packages_sha256
    FROM run_history
),
ttft AS (
    SELECT DISTINCT ON (run_id, trial, phase, pipeline)
        run_id, trial, phase, pipeline, ttft_p50_ms
    FROM tokens
    WHERE ttft_p50_ms IS NOT NULL
    ORDER BY run_id, trial, phase, pipeline, stage
),
with_ttft AS (
    SELECT * FROM figures
    UNION ALL BY NAME  -- columns matched by name, not by position
    SELECT
        f.run_id, f.trial, f.phase, f.pipeline, 'ttft_p50_ms' AS metric, 4 AS metric_order,
        FALSE AS higher_is_better, t.ttft_p50_ms AS value, f.calibration_score,
        f.machine_class, f.spec_hash, f.host, f.collobench_version, f.git_commit, f.git_dirty,
        f.python_version, f.torch_version, f.transformers_version, f.cuda_version,
        f.driver_version, f.packages_sha256
    FROM figures AS f
    JOIN ttft AS t USING (run_id, trial, phase, pipeline)
    WHERE f.metric = 'queries_per_s'
),
foreign_load AS (
    SELECT run_id, trial, phase, max(foreign_cpu_cores) AS foreign_cpu_cores
    FROM host_load
    GROUP BY run_id, trial, phase
)
SELECT
    w.pipeline,
    w.metric,
    w.higher_is_better,
    w.value,
    w.calibration_score,
    l.foreign_cpu_cores,
    w.machine_class,
    w.spec_hash,
    w.host,
    w.collobench_version,
    w.git_commit,
    w.git_dirty,
    w.python_version,
    w.torch_version,
    w.transformers_version,
    w.cuda_version,
    w.driver_version,
    w.packages_sha256
FROM with_ttft AS w
LEFT JOIN foreign_load AS l USING (run_id, trial, phase)
ORDER BY w.pipeline, w.metric_order;

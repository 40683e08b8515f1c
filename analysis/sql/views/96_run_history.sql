-- run_history: every completed run's headline figures as a series per benchmark, with what the
-- run ran on beside each figure, so verdicts across runs (analysis/history/verdicts.py) can judge a new
-- run against the runs before it and say whether the code, the environment or the machine
-- changed. One row per (spec_hash, machine_class, trial, phase, pipeline, metric, run), in time
-- order (run_seq). Only runs with status 'ok': a failed run's figures are not a figure of the
-- benchmark (the `validity` check reports it).
--   metric            queries_per_s (higher is better), latency_p50_ms, latency_p99_ms (the
--                     verdict percentiles of `latency`; lower is better): the figures compare
--                     judges, from `throughput` and `latency`;
--   value             the run's figure; ci95_low / ci95_high its WITHIN-run interval
--                     (batch means over that run's queries: how well one run measured it, not
--                     how much runs differ; ci_method says which);
--   calibration_score the geometric mean of the `calibration` scores ('cpu_loop', on the
--                     pipeline's cores) before and after this phase: the machine's measured
--                     speed during it (NULL for a run without calibration);
--   machine_class     what a figure can only be compared within: CPU model, logical cores,
--                     memory (GiB) and GPU names; hosts of one class share a history, and
--                     `host` says which host each run ran on;
--   code              collobench_version, git_commit, git_dirty (of the checkout it ran from);
--   environment       python_version, torch_version, transformers_version, cuda_version,
--                     driver_version, packages_sha256 (sha256 of every installed distribution's
--                     name==version: any package change moves it).
CREATE OR REPLACE VIEW run_history AS
WITH run_facts AS (
    SELECT
        run_id,
        spec_hash,
        name AS spec_name,
        started_at,
        host,
        CAST(manifest AS JSON) AS m
    FROM runs
    WHERE status = 'ok'
),
fingerprints AS (
    SELECT
        run_id,
        spec_hash,
        spec_name,
        started_at,
        coalesce(host, m ->> '$.environment.hostname') AS host,
        m ->> '$.environment.packages.collobench' AS collobench_version,
        m ->> '$.environment.git.commit' AS git_commit,
        CAST(m ->> '$.environment.git.dirty' AS BOOLEAN) AS git_dirty,
        m ->> '$.environment.python.version' AS python_version,
        m ->> '$.environment.packages.torch' AS torch_version,
        m ->> '$.environment.packages.transformers' AS transformers_version,
        m ->> '$.environment.torch_cuda_version' AS cuda_version,
        m ->> '$.environment.nvidia_driver_version' AS driver_version,
        m ->> '$.environment.packages_sha256' AS packages_sha256,
        m ->> '$.environment.cpu.model' AS cpu_model,
        CAST(m ->> '$.environment.cpu.logical_cores' AS INTEGER) AS logical_cores,
        round(CAST(m ->> '$.environment.memory_total_bytes' AS DOUBLE) / 2 ^ 30) AS memory_gib,
        coalesce(
            array_to_string(
                list_sort(CAST(json_extract(m, '$.environment.gpus[*].name') AS VARCHAR[])), ', '
            ),
            ''
        ) AS gpu_names
    FROM run_facts
),
classed AS (
    SELECT
        *,
        concat_ws(
            ' / ',
            coalesce(cpu_model, 'unknown CPU'),
            coalesce(CAST(logical_cores AS VARCHAR), '?') || ' cores',
            coalesce(CAST(CAST(memory_gib AS BIGINT) AS VARCHAR), '?') || ' GiB',
            CASE WHEN gpu_names = '' THEN 'no GPU' ELSE gpu_names END
        ) AS machine_class
    FROM fingerprints
),
-- The machine's speed during each phase, per pipeline's cores.
phase_speed AS (
    SELECT run_id, trial, phase, pipeline, exp(avg(ln(score))) AS calibration_score
    FROM calibration
    WHERE workload = 'cpu_loop' AND score > 0
    GROUP BY run_id, trial, phase, pipeline
),
figures AS (
    SELECT run_id, trial, phase, pipeline, 1 AS metric_order, 'queries_per_s' AS metric,
        TRUE AS higher_is_better, queries_per_s AS value,
        queries_per_s_ci_low AS ci95_low, queries_per_s_ci_high AS ci95_high, ci_method
    FROM throughput
    UNION ALL
    SELECT run_id, trial, phase, pipeline, 2, 'latency_p50_ms', FALSE, latency_p50_ms,
        latency_p50_ci_low_ms, latency_p50_ci_high_ms, ci_method
    FROM latency
    UNION ALL
    SELECT run_id, trial, phase, pipeline, 3, 'latency_p99_ms', FALSE, latency_p99_ms,
        latency_p99_ci_low_ms, latency_p99_ci_high_ms, ci_method
    FROM latency
)
SELECT
    c.spec_hash,
    c.spec_name,
    c.machine_class,
    row_number() OVER (
        PARTITION BY c.spec_hash, c.machine_class, f.trial, f.phase, f.pipeline, f.metric
        ORDER BY c.started_at, c.run_id
    ) AS run_seq,
    c.run_id,
    c.started_at,
    f.trial,
    f.phase,
    f.pipeline,
    f.metric,
    f.metric_order,
    f.higher_is_better,
    f.value,
    f.ci95_low,
    f.ci95_high,
    CASE WHEN f.ci95_low IS NOT NULL THEN f.ci_method END AS ci_method,
    s.calibration_score,
    c.host,
    c.collobench_version,
    c.git_commit,
    c.git_dirty,
    c.python_version,
    c.torch_version,
    c.transformers_version,
    c.cuda_version,
    c.driver_version,
    c.packages_sha256,
    c.cpu_model,
    c.logical_cores,
    c.memory_gib,
    c.gpu_names
FROM figures AS f
JOIN classed AS c USING (run_id)
LEFT JOIN phase_speed AS s USING (run_id, trial, phase, pipeline)
ORDER BY c.spec_hash, c.machine_class, f.trial, f.phase, f.pipeline, f.metric_order, run_seq;

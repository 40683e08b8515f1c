-- host_load: the CPU in use on the host during each load window (`load_windows`: one per solo
-- baseline, one per collocated phase), split by whom, so load from outside the benchmark shows.
-- Figures are in cores (1.0 = one logical core busy all the window), means over the sampler's
-- ticks inside [window_start_ns, window_end_ns] of the window's own (run_id, trial, phase):
--   samples            host rows (scope 'host') in the window;
--   logical_cores      from the run's manifest (environment.cpu.logical_cores);
--   host_cpu_cores     mean host cpu_util (percent of all cores) / 100 * logical_cores;
--   workers_cpu_cores  mean over ticks of the summed `process` rows (percent of one core) of the
--                      window's pipelines (its baseline's own, or every pipeline collocated) / 100;
--   harness_cpu_cores  mean `harness` rows (launcher and samplers, one row a tick) / 100;
--   services_cpu_cores mean over ticks of the summed `service` rows (the servers the benchmark
--                      started, and their descendants) / 100; 0 when the run has none;
--   foreign_cpu_cores  host - workers - harness - services: what else ran (other processes,
--                      the kernel's own threads); NULL when any part is missing.
-- foreign_cpu_warning: foreign_cpu_cores > 0.25, a quarter of a core held for the whole window.
-- That is well above what sampling leaves behind (CPU time moves in 10 ms jiffies, so one 100 ms
-- tick is off by up to 0.1 core, and a window's mean by far less) and well below a neighbour
-- that competes for a core, so a warning points at something real on the host.
-- Idle-baseline samples (phase 'idle') never fall in a window: windows are solo or collocated.
CREATE OR REPLACE VIEW host_load AS
WITH cores AS (
    SELECT
        run_id,
        TRY_CAST(manifest ->> '$.environment.cpu.logical_cores' AS INTEGER) AS logical_cores
    FROM runs
),
host AS (
    SELECT
        w.run_id,
        w.trial,
        w.phase,
        w.pipeline,
        count(h.ts_ns) AS samples,
        avg(h.cpu_util) AS cpu_util
    FROM load_windows AS w
    LEFT JOIN host_samples AS h
        ON w.run_id = h.run_id AND w.trial = h.trial AND w.phase = h.phase
        AND h.scope = 'host' AND h.ts_ns BETWEEN w.window_start_ns AND w.window_end_ns
    GROUP BY w.run_id, w.trial, w.phase, w.pipeline
),
worker_ticks AS (
    SELECT
        w.run_id,
        w.trial,
        w.phase,
        w.pipeline,
        p.ts_ns,
        sum(p.cpu_util) AS cpu_util
    FROM load_windows AS w
    JOIN host_samples AS p
        ON w.run_id = p.run_id AND w.trial = p.trial AND w.phase = p.phase
        AND p.scope = 'process' AND p.ts_ns BETWEEN w.window_start_ns AND w.window_end_ns
        AND (w.pipeline IS NULL OR p.pipeline = w.pipeline)
    GROUP BY w.run_id, w.trial, w.phase, w.pipeline, p.ts_ns
),
workers AS (
    SELECT run_id, trial, phase, pipeline, avg(cpu_util) AS cpu_util
    FROM worker_ticks
    GROUP BY run_id, trial, phase, pipeline
),
service_ticks AS (
    SELECT w.run_id, w.trial, w.phase, w.pipeline, v.ts_ns, sum(v.cpu_util) AS cpu_util
    FROM load_windows AS w
    JOIN host_samples AS v
        ON w.run_id = v.run_id AND w.trial = v.trial AND w.phase = v.phase
        AND v.scope = 'service' AND v.ts_ns BETWEEN w.window_start_ns AND w.window_end_ns
    GROUP BY w.run_id, w.trial, w.phase, w.pipeline, v.ts_ns
),
services AS (
    SELECT run_id, trial, phase, pipeline, avg(cpu_util) AS cpu_util
    FROM service_ticks
    GROUP BY run_id, trial, phase, pipeline
),
harness AS (
    SELECT w.run_id, w.trial, w.phase, w.pipeline, avg(r.cpu_util) AS cpu_util
    FROM load_windows AS w
    JOIN host_samples AS r
        ON w.run_id = r.run_id AND w.trial = r.trial AND w.phase = r.phase
        AND r.scope = 'harness' AND r.ts_ns BETWEEN w.window_start_ns AND w.window_end_ns
    GROUP BY w.run_id, w.trial, w.phase, w.pipeline
),
loads AS (
    SELECT
        w.run_id,
        w.trial,
        w.phase,
        w.pipeline,
        w.window_start_ns,
        w.window_end_ns,
        h.samples,
        c.logical_cores,
        h.cpu_util / 100 * c.logical_cores AS host_cpu_cores,
        k.cpu_util / 100 AS workers_cpu_cores,
        r.cpu_util / 100 AS harness_cpu_cores,
        coalesce(v.cpu_util, 0) / 100 AS services_cpu_cores
    FROM load_windows AS w
    JOIN host AS h
        ON w.run_id = h.run_id AND w.trial = h.trial AND w.phase = h.phase
        AND w.pipeline IS NOT DISTINCT FROM h.pipeline
    LEFT JOIN cores AS c ON w.run_id = c.run_id
    LEFT JOIN workers AS k
        ON w.run_id = k.run_id AND w.trial = k.trial AND w.phase = k.phase
        AND w.pipeline IS NOT DISTINCT FROM k.pipeline
    LEFT JOIN harness AS r
        ON w.run_id = r.run_id AND w.trial = r.trial AND w.phase = r.phase
        AND w.pipeline IS NOT DISTINCT FROM r.pipeline
    LEFT JOIN services AS v
        ON w.run_id = v.run_id AND w.trial = v.trial AND w.phase = v.phase
        AND w.pipeline IS NOT DISTINCT FROM v.pipeline
)
SELECT
    *,
    host_cpu_cores - workers_cpu_cores - harness_cpu_cores - services_cpu_cores
        AS foreign_cpu_cores,
    host_cpu_cores - workers_cpu_cores - harness_cpu_cores - services_cpu_cores > 0.25
        AS foreign_cpu_warning
FROM loads;

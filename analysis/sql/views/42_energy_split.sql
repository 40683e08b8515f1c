-- energy_split: each device's energy over a LOAD WINDOW divided between its consumers, per
-- (run_id, trial, phase, pipeline, device). An ATTRIBUTION, not a measurement: no sensor
-- measures one process's joules, so the device's measured total (`energy.energy_j`, the
-- attribution-free figure, repeated on every row as total_energy_j) is split in proportion to
-- what each consumer used of the device while the window ran:
--   method 'gpu_sm_util_share'  device 'gpu:<index>': share = the consumer's summed `sm_util`
--       over the `gpu_process_samples` ticks inside [window_start_ns, window_end_ns] / the
--       summed sm_util of every process sampled on that GPU in the window. A process row is
--       the pipeline's when its `pipeline` is set by the sampler, else when its pid is a
--       pipeline worker's (`host_samples` scope 'process' rows of the same run, trial and
--       phase carry each worker's pid); any other process is consumer 'other'.
--   method 'cpu_util_share'  device 'host': share = the pipeline's summed `cpu_util` of its
--       `host_samples` scope 'process' rows (its worker and children) in the window / the
--       summed cpu_util of every process and harness row in the window; the harness's
--       (launcher, samplers) goes to consumer 'other'. CPU of processes outside the benchmark
--       is not sampled per process (`host_load.foreign_cpu_cores` shows it), so its energy is
--       spread over the sampled consumers.
--   Services (the spec's `services:`, servers the benchmark started) are consumers of their
--       own, consumer 'service' with `pipeline` = the service's name: on a GPU, the
--       `gpu_process_samples` rows the sampler named after the service (the server or a
--       descendant) or whose pid is the server's (`host_samples` scope 'service'); on the
--       host, its `host_samples` scope 'service' rows (the server and its descendants). A
--       server stays up across phases, so it has a row in every window, solo baselines
--       included, on every device it was sampled on (share 0 when it idled). The run's
--       services are the names in its manifest's spec.services and in its 'service' rows.
-- Idle power is split the same way (a share of the whole energy, not of the dynamic part).
-- Rows: one per pipeline of the window (solo: its own; collocated: every pipeline with
-- measured queries), one per service sampled in the window, and one with consumer 'other'
-- (pipeline NULL) when something else used the device. The shares of a window's rows add up to 1 and their energy_j to total_energy_j.
-- share and energy_j are NULL when the device was not sampled per process in the window (or
-- nothing used it); total_energy_j is NULL when the window's energy is (see `energy`).
CREATE OR REPLACE VIEW energy_split AS
WITH window_pipelines AS (
    SELECT DISTINCT w.run_id, w.trial, w.phase, w.pipeline AS window_pipeline, q.pipeline
    FROM load_windows AS w
    -- throughput has a row for every pipeline with measured queries in the phase (stored).
    JOIN throughput AS q
        ON w.run_id = q.run_id AND w.trial = q.trial AND w.phase = q.phase
        AND (w.pipeline IS NULL OR q.pipeline = w.pipeline)
),
worker_pids AS (
    SELECT DISTINCT run_id, trial, phase, pid, pipeline
    FROM host_samples
    WHERE scope IN ('process', 'service') AND pid IS NOT NULL AND pipeline IS NOT NULL
),
services AS (
    SELECT DISTINCT r.run_id, s ->> '$.name' AS service
    FROM runs AS r, unnest(CAST(r.manifest -> '$.spec.services' AS JSON[])) AS t(s)
    UNION
    SELECT DISTINCT run_id, pipeline AS service
    FROM host_samples
    WHERE scope = 'service' AND pipeline IS NOT NULL
),
-- Every sampled use of a device, with its consumer: a pipeline's or a service's name, or
-- NULL ('other').
named_uses AS (
    SELECT
        g.run_id,
        g.trial,
        g.phase,
        'gpu:' || g.gpu AS device,
        g.ts_ns,
        coalesce(g.pipeline, p.pipeline) AS pipeline,
        g.sm_util AS used
    FROM gpu_process_samples AS g
    LEFT JOIN worker_pids AS p
        ON g.run_id = p.run_id AND g.trial = p.trial AND g.phase = p.phase AND g.pid = p.pid
    WHERE g.sm_util IS NOT NULL
    UNION ALL
    SELECT
        run_id,
        trial,
        phase,
        'host' AS device,
        ts_ns,
        CASE WHEN scope IN ('process', 'service') THEN pipeline END AS pipeline,
        cpu_util AS used
    FROM host_samples
    WHERE scope IN ('process', 'service', 'harness') AND cpu_util IS NOT NULL
),
uses AS (
    SELECT u.*, s.service IS NOT NULL AS service
    FROM named_uses AS u
    LEFT JOIN services AS s ON u.run_id = s.run_id AND u.pipeline = s.service
),
-- Use per window, device and consumer. In a solo window, another pipeline's rows (none are
-- expected: a baseline runs alone) would count as 'other'; a service's are its own.
used AS (
    SELECT
        w.run_id,
        w.trial,
        w.phase,
        w.pipeline AS window_pipeline,
        u.device,
        CASE
            WHEN w.pipeline IS NULL OR u.pipeline = w.pipeline OR u.service THEN u.pipeline
        END AS pipeline,
        u.service,
        sum(u.used) AS used
    FROM load_windows AS w
    JOIN uses AS u
        ON w.run_id = u.run_id AND w.trial = u.trial AND w.phase = u.phase
        AND u.ts_ns BETWEEN w.window_start_ns AND w.window_end_ns
    GROUP BY ALL
),
-- Consumers: the window's pipelines on every device measured in it, the services sampled on
-- a device in it, plus 'other' where used.
consumers AS (
    SELECT
        e.run_id,
        e.trial,
        e.phase,
        e.pipeline AS window_pipeline,
        e.device,
        p.pipeline,
        FALSE AS service
    FROM energy AS e
    JOIN window_pipelines AS p
        ON e.run_id = p.run_id AND e.trial = p.trial AND e.phase = p.phase
        AND e.pipeline IS NOT DISTINCT FROM p.window_pipeline
    UNION
    SELECT run_id, trial, phase, window_pipeline, device, pipeline, TRUE AS service
    FROM used
    WHERE service
    UNION
    SELECT run_id, trial, phase, window_pipeline, device, NULL AS pipeline, FALSE AS service
    FROM used
    WHERE pipeline IS NULL AND used > 0
),
shares AS (
    SELECT
        c.*,
        u.used,
        sum(u.used) OVER (
            PARTITION BY c.run_id, c.trial, c.phase, c.window_pipeline, c.device
        ) AS used_total
    FROM consumers AS c
    LEFT JOIN used AS u
        ON c.run_id = u.run_id AND c.trial = u.trial AND c.phase = u.phase
        AND c.window_pipeline IS NOT DISTINCT FROM u.window_pipeline
        AND c.device = u.device AND c.pipeline IS NOT DISTINCT FROM u.pipeline
)
SELECT
    s.run_id,
    s.trial,
    s.phase,
    s.pipeline,
    CASE
        WHEN s.pipeline IS NULL THEN 'other' WHEN s.service THEN 'service' ELSE 'pipeline'
    END AS consumer,
    s.device,
    CASE WHEN s.device = 'host' THEN 'cpu_util_share' ELSE 'gpu_sm_util_share' END AS method,
    coalesce(s.used, 0) / nullif(s.used_total, 0) AS share,
    e.energy_j * coalesce(s.used, 0) / nullif(s.used_total, 0) AS energy_j,
    e.energy_j AS total_energy_j,
    e.energy_source,
    e.window_start_ns,
    e.window_end_ns,
    e.window_s,
    -- Whose window: the solo pipeline of a solo baseline's window, NULL for a collocated one
    -- (a solo phase has one window per pipeline, and a service has a row in each).
    s.window_pipeline
FROM shares AS s
JOIN energy AS e
    ON s.run_id = e.run_id AND s.trial = e.trial AND s.phase = e.phase
    AND s.window_pipeline IS NOT DISTINCT FROM e.pipeline AND s.device = e.device;

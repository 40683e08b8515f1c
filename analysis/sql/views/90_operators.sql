-- Operator profiling views, over operator_spans (model stages with profile_every = N write it:
-- torch.profiler around every Nth query's model call). Warm-up queries are excluded, as
-- everywhere (matched by query id).

-- profiled_queries: one row per profiled stage visit, from its 'window' row (written even when
-- the profiler saw no event), with the visit's stage event. Its service time includes the
-- profiler's own cost; the latency views keep these queries (see
-- docs/stages.md#operator-profiling): join against this view to leave them out of an analysis of your own.
CREATE OR REPLACE VIEW profiled_queries AS
SELECT
    w.run_id,
    w.trial,
    w.phase,
    w.pipeline,
    w.query_id,
    w.stage,
    w.visit,
    w.start_ns AS window_start_ns,      -- the profiler started
    w.end_ns AS window_end_ns,          -- the profiler stopped (events not yet converted)
    e.started_ns,
    e.finished_ns,
    e.finished_ns - e.started_ns AS service_ns,
    coalesce(q.warmup, false) AS warmup
FROM operator_spans AS w
LEFT JOIN stage_events AS e
    ON e.run_id = w.run_id
    AND e.trial = w.trial
    AND e.phase = w.phase
    AND e.pipeline IS NOT DISTINCT FROM w.pipeline
    AND e.query_id = w.query_id
    AND e.stage = w.stage
    AND e.visit = w.visit
LEFT JOIN queries AS q
    ON q.run_id = w.run_id
    AND q.trial = w.trial
    AND q.phase = w.phase
    AND q.pipeline IS NOT DISTINCT FROM w.pipeline
    AND q.query_id = w.query_id
WHERE w.device_type = 'window';

-- operator_summary: where a stage's profiled time goes, per (run_id, trial, phase, pipeline,
-- stage, device_type, operator), over the measured (non-warm-up) profiled visits.
--   calls                 events of this operator
--   profiled_queries      profiled visits of the stage (the denominator, whether or not the
--                         operator appeared in each)
--   self_cpu_ms           sum of CPU time minus child operators (cpu rows; NULL for devices)
--   total_cpu_ms          sum of CPU time including child operators (nested operators such as
--                         aten::conv2d > aten::convolution > ... each count the same time)
--   span_ms               sum of end - start: for cuda rows, the kernels' device time
--   profiled_service_ms   sum of the stage's service time over its profiled visits
--   self_share, total_share, span_share   the sums above / profiled_service_ms. Self shares of
--                         the cpu operators of one thread add up to at most 1; total and span
--                         shares of nested operators overlap, and device time can overlap the
--                         host's. The rest of the service time is Python, the profiler's cost
--                         and whatever the stage does outside its model call.
CREATE OR REPLACE VIEW operator_summary AS
WITH visits AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        stage,
        count(*) AS profiled_queries,
        sum(service_ns) AS service_ns
    FROM profiled_queries
    WHERE NOT warmup
    GROUP BY run_id, trial, phase, pipeline, stage
),
spans AS (
    SELECT o.*
    FROM operator_spans AS o
    SEMI JOIN profiled_queries AS p
        ON p.run_id = o.run_id
        AND p.trial = o.trial
        AND p.phase = o.phase
        AND p.pipeline IS NOT DISTINCT FROM o.pipeline
        AND p.query_id = o.query_id
        AND p.stage = o.stage
        AND p.visit = o.visit
        AND NOT p.warmup
    WHERE o.device_type <> 'window'
)
SELECT
    s.run_id,
    s.trial,
    s.phase,
    s.pipeline,
    s.stage,
    s.device_type,
    s.operator,
    count(*) AS calls,
    any_value(v.profiled_queries) AS profiled_queries,
    sum(s.self_cpu_ns) / 1e6 AS self_cpu_ms,
    sum(s.total_cpu_ns) / 1e6 AS total_cpu_ms,
    sum(s.end_ns - s.start_ns) / 1e6 AS span_ms,
    avg(s.end_ns - s.start_ns) / 1e3 AS mean_span_us,
    any_value(v.service_ns) / 1e6 AS profiled_service_ms,
    sum(s.self_cpu_ns) / nullif(any_value(v.service_ns), 0) AS self_share,
    sum(s.total_cpu_ns) / nullif(any_value(v.service_ns), 0) AS total_share,
    sum(s.end_ns - s.start_ns) / nullif(any_value(v.service_ns), 0) AS span_share
FROM spans AS s
JOIN visits AS v
    ON v.run_id = s.run_id
    AND v.trial = s.trial
    AND v.phase = s.phase
    AND v.pipeline IS NOT DISTINCT FROM s.pipeline
    AND v.stage = s.stage
GROUP BY s.run_id, s.trial, s.phase, s.pipeline, s.stage, s.device_type, s.operator;

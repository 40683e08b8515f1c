-- interference: each pipeline's slowdown next to the set of pipelines it ran with, per
-- (run_id, trial, pipeline, co_runners): the matrix for specs with more than two pipelines,
-- where "collocated vs solo" alone does not say who hurts whom.
-- The figures are `contention`'s, not re-derived: throughput_ratio and p50/p99 slowdown of the
-- pipeline collocated vs its solo baseline, their 95% intervals (ci_method
-- 'batch_means_delta': delta method on the log ratio, Welch df) and verdicts ('no measurable
-- effect' when the interval spans 1 or lies within 1 +- 1%).
-- co_runners is read from the data, not assumed: the sorted list of the OTHER pipelines with
-- measured queries in the same (run_id, trial, phase); pipelines_in_phase counts them all.
-- Phases: 'collocated' (every pipeline; co-runners = all the others) and, when the spec asks
-- (collocation.subsets: pairs | all), each subset phase 'collocated:a+b' the launcher ran,
-- each paired by `contention` with the same solo baseline. With `pairs` and n pipelines, each
-- pipeline has n - 1 pair rows and one full-set row per trial; with `all`, one row per subset
-- of the others (2^(n-1) - 1). Without subsets, one row per pipeline: "all the others".
-- A pipeline that recorded no measured query in a phase has no row there.
CREATE OR REPLACE VIEW interference AS
WITH members AS (
    -- throughput (stored) has one row per pipeline with measured queries in a phase
    SELECT run_id, trial, phase, pipeline
    FROM throughput
    WHERE phase <> 'solo' AND pipeline IS NOT NULL
),
sets AS (
    SELECT
        m.run_id,
        m.trial,
        m.phase,
        m.pipeline,
        list_sort(list(o.pipeline) FILTER (WHERE o.pipeline <> m.pipeline)) AS co_runners,
        count(*) AS pipelines_in_phase
    FROM members AS m
    JOIN members AS o ON m.run_id = o.run_id AND m.trial = o.trial AND m.phase = o.phase
    GROUP BY m.run_id, m.trial, m.phase, m.pipeline
)
SELECT
    c.run_id,
    c.trial,
    s.phase,
    c.pipeline,
    s.co_runners,
    array_to_string(s.co_runners, '+') AS co_runner_set,
    s.pipelines_in_phase,
    c.throughput_ratio,
    c.throughput_ratio_ci_low,
    c.throughput_ratio_ci_high,
    c.throughput_verdict,
    c.p50_slowdown,
    c.p50_slowdown_ci_low,
    c.p50_slowdown_ci_high,
    c.p50_verdict,
    c.p99_slowdown,
    c.p99_slowdown_ci_low,
    c.p99_slowdown_ci_high,
    c.p99_verdict,
    c.ci_method,
    c.solo_failed,
    c.collocated_failed
FROM contention AS c
JOIN sets AS s
    ON c.run_id = s.run_id AND c.trial = s.trial AND c.phase = s.phase
    AND c.pipeline = s.pipeline;

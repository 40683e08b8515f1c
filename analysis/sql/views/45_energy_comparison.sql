-- energy_comparison: energy per unit of work, running the pipelines in turn (their solo
-- baselines) vs together (the collocated phase); one row per (run_id, trial) that has a
-- collocated load window. Comparing joules alone compares unequal work: two time-sliced
-- pipelines that each do half their solo work while collocated spend half the joules at the
-- same J per query, which a difference of joules reads as a 50% saving.
-- Devices: those with any usable energy sample in the trial's load phases (`energy`.coverage
-- not NULL in some window); each figure sums them and is NULL unless every one of them has an
-- energy figure in every window it sums (a missing baseline or a partly covered window gives
-- NULL, never a partial sum). Work: ok measured (non-warm-up) queries, per pipeline.
--   solo_energy_j           every pipeline's solo baseline, added up;
--   solo_ok_queries         their ok queries (NULL when a pipeline has no baseline);
--   collocated_energy_j, collocated_ok_queries   the collocated load window, all pipelines;
--   *_j_per_query           energy / ok queries;
--   energy_per_query_ratio  collocated / solo J per query: < 1, collocation spends less
--                           energy per query; > 1, more;
--   work_differs            true when any pipeline's ok query count differs by more than 5% of
--                           its solo count between its baseline and the collocated phase (a
--                           pipeline absent from one phase did 0 there): the phases then did
--                           unequal work and even the per-query figures compare different
--                           mixes; NULL when a baseline is missing;
--   dynamic_*               the same from `energy`.dynamic_energy_j (measured idle power times
--                           each window's length subtracted): the energy the load itself caused;
--                           NULL without an idle baseline;
--   energy_source           every source behind the figures, '+'-joined.
-- Subset phases (`collocated:a+b`, collocation.subsets) are left out on purpose: the question
-- here is "all pipelines in turn vs all together", over the same work; a subset phase runs
-- part of the work and its energy is in `energy` / `perf_per_watt` under its own phase.
CREATE OR REPLACE VIEW energy_comparison AS
WITH trials AS (
    SELECT run_id, trial FROM load_windows WHERE phase = 'collocated'
),
work AS (
    -- ok measured queries per pipeline and phase, as `throughput` (stored) counts them
    SELECT run_id, trial, phase, pipeline, ok_queries
    FROM throughput
    WHERE phase IN ('solo', 'collocated')
),
-- Every pipeline of the trial (in either phase), with its ok queries in each.
pipelines AS (
    SELECT
        coalesce(s.run_id, c.run_id) AS run_id,
        coalesce(s.trial, c.trial) AS trial,
        coalesce(s.pipeline, c.pipeline) AS pipeline,
        s.ok_queries AS solo_ok,
        coalesce(c.ok_queries, 0) AS collocated_ok
    FROM (SELECT * FROM work WHERE phase = 'solo') AS s
    FULL OUTER JOIN (SELECT * FROM work WHERE phase = 'collocated') AS c
        ON s.run_id = c.run_id AND s.trial = c.trial AND s.pipeline = c.pipeline
),
trial_work AS (
    SELECT
        run_id,
        trial,
        count(*) AS pipelines,
        CASE WHEN count(solo_ok) = count(*) THEN sum(solo_ok) END AS solo_ok_queries,
        sum(collocated_ok) AS collocated_ok_queries,
        CASE
            WHEN count(solo_ok) = count(*)
                THEN bool_or(abs(collocated_ok - solo_ok) > 0.05 * solo_ok)
        END AS work_differs
    FROM pipelines
    GROUP BY run_id, trial
),
-- `energy` read once: every (window, device) figure of the trial.
figures AS MATERIALIZED (
    SELECT run_id, trial, phase, device, energy_j, dynamic_energy_j, energy_source, coverage
    FROM energy
),
measured_devices AS (
    SELECT DISTINCT run_id, trial, device FROM figures WHERE coverage IS NOT NULL
),
devices AS (
    SELECT run_id, trial, count(*) AS devices FROM measured_devices GROUP BY run_id, trial
),
-- Per phase: how many (window, device) figures exist, their sums, and their sources.
phase_energy AS (
    SELECT
        f.run_id,
        f.trial,
        f.phase,
        count(f.energy_j) AS measured,
        sum(f.energy_j) AS energy_j,
        count(f.dynamic_energy_j) AS dynamic_measured,
        sum(f.dynamic_energy_j) AS dynamic_energy_j,
        list(f.energy_source) FILTER (WHERE f.energy_source IS NOT NULL) AS sources
    FROM figures AS f
    JOIN measured_devices AS d
        ON f.run_id = d.run_id AND f.trial = d.trial AND f.device = d.device
    GROUP BY f.run_id, f.trial, f.phase
),
totals AS (
    SELECT
        t.run_id,
        t.trial,
        w.solo_ok_queries,
        w.collocated_ok_queries,
        w.work_differs,
        CASE WHEN s.measured = w.pipelines * d.devices THEN s.energy_j END AS solo_energy_j,
        CASE WHEN c.measured = d.devices THEN c.energy_j END AS collocated_energy_j,
        CASE WHEN s.dynamic_measured = w.pipelines * d.devices THEN s.dynamic_energy_j END
            AS dynamic_solo_energy_j,
        CASE WHEN c.dynamic_measured = d.devices THEN c.dynamic_energy_j END
            AS dynamic_collocated_energy_j,
        -- Sources may themselves be '+'-joined (a counter that fell back to power).
        nullif(array_to_string(list_sort(list_distinct(flatten([
            string_split(source, '+') FOR source IN list_concat(
                coalesce(s.sources, []), coalesce(c.sources, [])
            )
        ]))), '+'), '') AS energy_source
    FROM trials AS t
    JOIN trial_work AS w ON t.run_id = w.run_id AND t.trial = w.trial
    LEFT JOIN devices AS d ON t.run_id = d.run_id AND t.trial = d.trial
    LEFT JOIN phase_energy AS s
        ON t.run_id = s.run_id AND t.trial = s.trial AND s.phase = 'solo'
    LEFT JOIN phase_energy AS c
        ON t.run_id = c.run_id AND t.trial = c.trial AND c.phase = 'collocated'
),
per_query AS (
    SELECT
        *,
        solo_energy_j / nullif(solo_ok_queries, 0) AS solo_j_per_query,
        collocated_energy_j / nullif(collocated_ok_queries, 0) AS collocated_j_per_query,
        dynamic_solo_energy_j / nullif(solo_ok_queries, 0) AS dynamic_solo_j_per_query,
        dynamic_collocated_energy_j / nullif(collocated_ok_queries, 0)
            AS dynamic_collocated_j_per_query
    FROM totals
)
SELECT
    run_id,
    trial,
    solo_energy_j,
    solo_ok_queries,
    solo_j_per_query,
    collocated_energy_j,
    collocated_ok_queries,
    collocated_j_per_query,
    collocated_j_per_query / nullif(solo_j_per_query, 0) AS energy_per_query_ratio,
    work_differs,
    dynamic_solo_energy_j,
    dynamic_solo_j_per_query,
    dynamic_collocated_energy_j,
    dynamic_collocated_j_per_query,
    dynamic_collocated_j_per_query / nullif(dynamic_solo_j_per_query, 0)
        AS dynamic_energy_per_query_ratio,
    energy_source
FROM per_query;

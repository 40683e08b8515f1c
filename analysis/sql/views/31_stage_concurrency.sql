-- stage_concurrency(run): a table macro, `SELECT * FROM stage_concurrency('<run_id>')`: how
-- many visits of a stage were in flight at once in that run, per (run_id, trial, phase,
-- pipeline, stage), from the recorded [started_ns, finished_ns) intervals of its visits
-- (a stage with `concurrency: N` threads, or an asynchronous stage with up to `max_in_flight`
-- visits on its event loop). Every visit counts, warm-up included: this is what the stage was
-- doing, not a measured figure. A sweep over the interval ends in time order (a visit that
-- finishes at the instant another starts does not overlap it): in_flight_max is the most
-- visits in flight at any instant (1 for a stage served one visit at a time), in_flight_mean
-- the time-weighted mean while at least one was (= service_s / busy_s), busy_s the wall time
-- with at least one visit in flight, service_s the visits' summed durations.
-- A macro for one run, not a view: the sweep sorts every visit, about 0.5 s per run of 500k
-- visits, so over a warehouse of 100 such runs a view took 90 s (perf/analysis_speed.py), and
-- storing it per run would double the time a load takes.
CREATE OR REPLACE MACRO stage_concurrency(run) AS TABLE
WITH edges AS (
    SELECT run_id, trial, phase, pipeline, stage, started_ns AS ts_ns, 1 AS step
    FROM stage_events
    WHERE run_id = run
    UNION ALL
    SELECT run_id, trial, phase, pipeline, stage, finished_ns AS ts_ns, -1 AS step
    FROM stage_events
    WHERE run_id = run
),
levels AS (
    SELECT
        *,
        sum(step) OVER (
            PARTITION BY run_id, trial, phase, pipeline, stage
            ORDER BY ts_ns, step
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS in_flight,
        lead(ts_ns) OVER (
            PARTITION BY run_id, trial, phase, pipeline, stage ORDER BY ts_ns, step
        ) - ts_ns AS held_ns
    FROM edges
)
SELECT
    run_id,
    trial,
    phase,
    pipeline,
    stage,
    count(*) FILTER (WHERE step = 1) AS visits,
    max(in_flight) AS in_flight_max,
    sum(in_flight * held_ns) / nullif(sum(held_ns) FILTER (WHERE in_flight > 0), 0)
        AS in_flight_mean,
    coalesce(sum(held_ns) FILTER (WHERE in_flight > 0), 0) / 1e9 AS busy_s,
    sum(in_flight * held_ns) / 1e9 AS service_s
FROM levels
GROUP BY run_id, trial, phase, pipeline, stage;

-- accuracy: what a grading stage answered, per (run_id, trial, phase, pipeline, stage), beside
-- performance. A stage that knows the right answers (e.g. torchvision.classify with labels)
-- writes, per visit, `graded` (samples it graded: the batch size) and `correct` (samples it
-- answered right, top-1), so a batched query counts each of its samples exactly.
-- Which visits count: those of measured queries only, as in the latency views (`queries`
-- WHERE NOT warmup, matched by query id): warm-up queries and visits with no measured query row
-- (outside the load window) are left out; visits that failed (status 'error') graded nothing.
--   accuracy      sum(correct) / sum(graded): top-1 accuracy over every graded sample.
--   accuracy_ci_* Wilson score 95% interval (z = 1.96) on sum(correct) out of sum(graded),
--                 which stays inside [0, 1] and is sensible at 0% and 100%. It treats the
--                 graded samples as independent draws: a dataset stage that cycles serves the
--                 same images again, so with more graded samples than distinct images the
--                 interval is narrower than the dataset's own uncertainty.
-- NULL accuracy: nothing was graded (sum(graded) = 0).
CREATE OR REPLACE VIEW accuracy_from_rows AS
WITH graded_visits AS (
    SELECT e.run_id, e.trial, e.phase, e.pipeline, e.stage, e.graded, e.correct
    FROM measured_stage_events_from_rows AS e
    WHERE e.graded IS NOT NULL AND e.status = 'ok'
),
totals AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        stage,
        count(*) AS graded_visits,
        CAST(sum(graded) AS BIGINT) AS graded,
        CAST(sum(coalesce(correct, 0)) AS BIGINT) AS correct
    FROM graded_visits
    GROUP BY run_id, trial, phase, pipeline, stage
),
wilson AS (
    SELECT *, CASE WHEN graded > 0 THEN correct / graded::DOUBLE END AS p
    FROM totals
)
SELECT
    run_id,
    trial,
    phase,
    pipeline,
    stage,
    graded_visits,
    graded,
    correct,
    p AS accuracy,
    wilson95(p, graded, -1) AS accuracy_ci_low,
    wilson95(p, graded, 1) AS accuracy_ci_high,
    'wilson_95' AS ci_method
FROM wilson;

-- Stored once per run at load (analysis/warehouse/stored_summaries.py), so reading `accuracy` scans a few rows
-- per run however many events the warehouse holds; `accuracy_from_rows` is the definition.
-- The loader skips this summary for runs without a graded visit (it would be empty):
-- empty unless: SELECT count(*) > 0 FROM stage_events WHERE graded IS NOT NULL
CREATE TABLE IF NOT EXISTS summary_accuracy AS SELECT * FROM accuracy_from_rows LIMIT 0;
CREATE OR REPLACE VIEW accuracy AS SELECT * FROM summary_accuracy;

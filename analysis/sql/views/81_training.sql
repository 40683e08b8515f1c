-- training: progress of a training stage, per (run_id, trial, phase, pipeline, stage). A training
-- stage (e.g. torchvision.train) does one optimiser step per query and writes that step's loss
-- in stage_events.loss. Steps are ordered by when they started (one stage runs its steps one
-- after another in its own thread; query id breaks ties).
-- Which steps count: those of measured queries only, as in the latency views (warm-up queries
-- and visits without a measured query row are left out), so `first_loss` is the loss of the
-- first measured step, after the warm-up steps already trained the model.
--   steps              steps with a loss
--   first_loss         loss of the first step, last_loss of the last one, min_loss the lowest
--   tail_mean_loss     mean loss of the last 10% of the steps (at least one step): less noisy
--                      than last_loss, which is one minibatch's
--   tail_steps         how many steps that mean is over
CREATE OR REPLACE VIEW training_from_rows AS
WITH steps AS (
    SELECT
        e.run_id,
        e.trial,
        e.phase,
        e.pipeline,
        e.stage,
        e.loss,
        row_number() OVER (
            PARTITION BY e.run_id, e.trial, e.phase, e.pipeline, e.stage
            ORDER BY e.started_ns, e.query_id
        ) AS step,
        count(*) OVER (PARTITION BY e.run_id, e.trial, e.phase, e.pipeline, e.stage) AS steps
    FROM measured_stage_events_from_rows AS e
    WHERE e.loss IS NOT NULL AND e.status = 'ok'
)
SELECT
    run_id,
    trial,
    phase,
    pipeline,
    stage,
    max(steps) AS steps,
    arg_min(loss, step) AS first_loss,
    arg_max(loss, step) AS last_loss,
    min(loss) AS min_loss,
    avg(loss) FILTER (WHERE step > steps - greatest(1, CAST(ceil(steps * 0.1) AS BIGINT)))
        AS tail_mean_loss,
    max(greatest(1, CAST(ceil(steps * 0.1) AS BIGINT))) AS tail_steps
FROM steps
GROUP BY run_id, trial, phase, pipeline, stage;

-- Stored once per run at load (analysis/warehouse/stored_summaries.py), so reading `training` scans a few rows
-- per run however many events the warehouse holds; `training_from_rows` is the definition.
-- The loader skips this summary for runs without a visit with a loss (it would be empty):
-- empty unless: SELECT count(*) > 0 FROM stage_events WHERE loss IS NOT NULL
CREATE TABLE IF NOT EXISTS summary_training AS SELECT * FROM training_from_rows LIMIT 0;
CREATE OR REPLACE VIEW training AS SELECT * FROM summary_training;

-- measured_stage_events: the stage visits of measured queries only, as the latency views count
-- them (`queries` WHERE NOT warmup, matched by query id): warm-up queries and visits without a
-- measured query row (outside the load window) are left out. What the views of a stage's own
-- results (`accuracy`, `training`) read.
CREATE OR REPLACE VIEW measured_stage_events AS
SELECT e.*
FROM stage_events AS e
SEMI JOIN (
    SELECT run_id, trial, phase, pipeline, query_id
    FROM queries
    WHERE NOT warmup AND in_scope(run_id)
) AS q
    ON e.run_id = q.run_id
    AND e.trial = q.trial
    AND e.phase = q.phase
    AND e.pipeline IS NOT DISTINCT FROM q.pipeline
    AND e.query_id = q.query_id
WHERE in_scope(e.run_id);

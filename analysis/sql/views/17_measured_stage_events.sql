-- measured_stage_events_from_rows: the stage visits of measured queries only, as the latency views count
-- them (`queries` WHERE NOT warmup, matched by query id): warm-up queries and visits without a
-- measured query row (outside the load window) are left out. What the views of a stage's own
-- results (`accuracy`, `training`) read: a definition the loader uses
-- (like every `*_from_rows` view), not in the warehouse.
CREATE OR REPLACE VIEW measured_stage_events_from_rows AS
SELECT e.*
FROM stage_events AS e
SEMI JOIN (
    SELECT run_id, trial, phase, pipeline, query_id
    FROM queries
    WHERE NOT warmup
) AS q
    ON e.run_id = q.run_id
    AND e.trial = q.trial
    AND e.phase = q.phase
    AND e.pipeline IS NOT DISTINCT FROM q.pipeline
    AND e.query_id = q.query_id;

-- pipeline_outcomes: how each pipeline fared in each phase of each run, read from the manifest
-- stored in `runs` (its `results`), so a failure and its reason are a query away
-- (`collobench sql "SELECT * FROM pipeline_outcomes WHERE status <> 'ok'"`) instead of buried
-- in the JSON. One row per (run_id, trial, phase, pipeline):
--   status      ok | failed | timeout | interrupted (the launcher's verdict);
--   error       the reason, NULL when ok: a stage's exception, "worker killed by SIGKILL
--               (possibly the OOM killer)", "recording failed: OSError: ...", ...;
--   exit_code   the worker process's exit code (negative: killed by that signal);
--   stopped_by  why the load generator stopped issuing;
--   issued, ok_queries, failed_queries (errors + timeouts), dropped: the worker's own counts.
-- A run cut short (status running) has rows for the phases that ended before the cut.
CREATE OR REPLACE VIEW pipeline_outcomes AS
SELECT
    r.run_id,
    CAST(o ->> '$.trial' AS INTEGER) AS trial,
    o ->> '$.phase' AS phase,
    o ->> '$.pipeline' AS pipeline,
    o ->> '$.status' AS status,
    o ->> '$.error' AS error,
    TRY_CAST(o ->> '$.exit_code' AS INTEGER) AS exit_code,
    o ->> '$.stopped_by' AS stopped_by,
    TRY_CAST(o ->> '$.issued' AS BIGINT) AS issued,
    TRY_CAST(o ->> '$.ok' AS BIGINT) AS ok_queries,
    TRY_CAST(o ->> '$.errors' AS BIGINT) + TRY_CAST(o ->> '$.timeouts' AS BIGINT)
        AS failed_queries,
    TRY_CAST(o ->> '$.dropped' AS BIGINT) AS dropped
FROM runs AS r,
    unnest(CAST(r.manifest -> '$.results' AS JSON[])) AS t(o);

-- run_warnings: the manifest's warnings, one row each, so what went wrong beside the pipelines
-- is queryable: a sampler that crashed or lost its GPU ("samples taken before it are kept"),
-- an energy counter that reset, foreign load in a window, a foreign process on the GPU.
-- `position` keeps the manifest's order (1-based).
CREATE OR REPLACE VIEW run_warnings AS
SELECT
    r.run_id,
    CAST(t.position AS INTEGER) AS position,
    w ->> '$' AS warning
FROM runs AS r,
    unnest(CAST(r.manifest -> '$.warnings' AS JSON[])) WITH ORDINALITY AS t(w, position);

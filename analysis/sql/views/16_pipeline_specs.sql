-- pipeline_specs: what each run's spec asked of each pipeline, read from the manifest stored in
-- `runs` (manifest.json verbatim, whose `spec` is the validated spec after --set overrides), so
-- views can compare measurements with the targets the user set. One row per (run_id, pipeline):
--   scenario   loadgen.type (server, offline, closed_loop...);
--   slo_ms     loadgen.slo_ms, NULL when the spec sets no latency target;
--   rate       loadgen.rate (queries/s), NULL for scenarios without one;
--   ttft_slo_ms, tpot_slo_ms  loadgen's token SLOs (time to first token, time per output
--              token), NULL when unset: the bounds of `token_goodput`.
-- A manifest without spec.pipelines (a run cut short before writing it) has no rows.
CREATE OR REPLACE VIEW pipeline_specs AS
SELECT
    r.run_id,
    p ->> '$.name' AS pipeline,
    p ->> '$.loadgen.type' AS scenario,
    TRY_CAST(p ->> '$.loadgen.slo_ms' AS DOUBLE) AS slo_ms,
    TRY_CAST(p ->> '$.loadgen.rate' AS DOUBLE) AS rate,
    TRY_CAST(p ->> '$.loadgen.ttft_slo_ms' AS DOUBLE) AS ttft_slo_ms,
    TRY_CAST(p ->> '$.loadgen.tpot_slo_ms' AS DOUBLE) AS tpot_slo_ms
FROM runs AS r,
    unnest(CAST(r.manifest -> '$.spec.pipelines' AS JSON[])) AS t(p);

-- The `slo` asset check's rows: one run's SLO verdicts (analysis view `slo_verdicts`), one per
-- (trial, phase, pipeline) whose spec sets slo_ms. $run: the run id.
SELECT trial, phase, pipeline, slo_ms, percentile, queries, over_slo, slo_verdict
FROM slo_verdicts
WHERE run_id = $run
ORDER BY trial, phase, pipeline;

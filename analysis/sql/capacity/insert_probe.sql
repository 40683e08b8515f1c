-- Record one probe of a capacity search (a ProbeRecord of capacity.json or probes.jsonl);
-- over_slo_share is computed here, NULL when the probe measured no query. A record written
-- before capacity II has no window_s (NULL) and no cannot_pass (false).
INSERT INTO capacity_probes (
    search_id, probe_index, kind, rate, seed, queries, over_slo, over_slo_share, verdict,
    p99_ms, abort_reason, run_dir, flagged, throughput_qps, duration_s, design_effect, pipelines,
    window_s, cannot_pass
)
VALUES (
    $search_id, $probe_index, $kind, $rate, $seed, $queries, $over_slo,
    CAST($over_slo AS DOUBLE) / nullif($queries, 0), $verdict, $p99_ms, $abort_reason,
    $run_dir, $flagged, $throughput_qps, $duration_s, $design_effect,
    CAST($pipelines AS JSON), $window_s, $cannot_pass
);

-- Record one capacity search from its search.json and capacity.json (analysis.capacity.warehouse_tables; the
-- loader has already deleted any earlier row of this search_id in the same transaction, so
-- this never conflicts). The answer's parameters are NULL while the search is unfinished, and
-- so are the fields a search written before capacity II lacks (stop_detail, spent_s, budget_s,
-- min_queries).
INSERT INTO capacity_searches (
    search_id, pipeline, slo_ms, percentile, precision, max_probes, probe_s, with_rates, ray,
    base_seed, min_rate, spec_source, spec_hash, certified_qps, estimate_qps, estimate_ci95_low,
    estimate_ci95_high, bracket_lo, bracket_hi, stop_reason, ceiling_qps,
    monotonicity_violations, flagged_probes, probes, estimate_method, complete, search_dir,
    loaded_at, stop_detail, spent_s, budget_s, min_queries
)
VALUES (
    $search_id, $pipeline, $slo_ms, $percentile, $precision, $max_probes, $probe_s,
    CAST($with_rates AS JSON), CAST($ray AS JSON), $base_seed, $min_rate, $spec_source,
    $spec_hash, $certified_qps, $estimate_qps, $estimate_ci95_low, $estimate_ci95_high,
    $bracket_lo, $bracket_hi, $stop_reason, $ceiling_qps, $monotonicity_violations,
    $flagged_probes, $probes, $estimate_method, $complete, $search_dir, now(), $stop_detail,
    $spent_s, $budget_s, $min_queries
);

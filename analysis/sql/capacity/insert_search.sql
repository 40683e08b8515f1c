-- Record one capacity search from its search.json and capacity.json (analysis.capacity_warehouse; the
-- loader has already deleted any earlier row of this search_id in the same transaction, so
-- this never conflicts). The answer's parameters are NULL while the search is unfinished.
INSERT INTO capacity_searches (
    search_id, pipeline, slo_ms, percentile, precision, max_probes, probe_s, with_rates, ray,
    base_seed, min_rate, spec_source, spec_hash, certified_qps, estimate_qps, estimate_ci95_low,
    estimate_ci95_high, bracket_lo, bracket_hi, stop_reason, ceiling_qps,
    monotonicity_violations, flagged_probes, probes, estimate_method, complete, search_dir,
    loaded_at
)
VALUES (
    $search_id, $pipeline, $slo_ms, $percentile, $precision, $max_probes, $probe_s,
    CAST($with_rates AS JSON), CAST($ray AS JSON), $base_seed, $min_rate, $spec_source,
    $spec_hash, $certified_qps, $estimate_qps, $estimate_ci95_low, $estimate_ci95_high,
    $bracket_lo, $bracket_hi, $stop_reason, $ceiling_qps, $monotonicity_violations,
    $flagged_probes, $probes, $estimate_method, $complete, $search_dir, now()
);

-- Record one ray of a capacity region from its region.json (analysis.capacity.warehouse_tables.load_region;
-- the region's earlier rows were deleted in the same transaction).
INSERT INTO capacity_region_rays (
    region_id, ray_index, angle_deg, pipeline_a, pipeline_b, direction_a, direction_b,
    solo_capacity_a_qps, solo_capacity_b_qps, certified_s, estimate_s, estimate_ci95_low_s,
    estimate_ci95_high_s, bracket_lo_s, bracket_hi_s, stop_reason, probes, flagged_probes,
    monotonicity_violations, search_id, region_dir,
    loaded_at
)
VALUES (
    $region_id, $ray_index, $angle_deg, $pipeline_a, $pipeline_b, $direction_a, $direction_b,
    $solo_capacity_a_qps, $solo_capacity_b_qps, $certified_s, $estimate_s,
    $estimate_ci95_low_s, $estimate_ci95_high_s, $bracket_lo_s, $bracket_hi_s, $stop_reason,
    $probes, $flagged_probes, $monotonicity_violations, $search_id, $region_dir, now()
);

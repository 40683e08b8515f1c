-- Record one measured segment of an A/B session (a line of segments.jsonl;
-- analysis.ab.warehouse_tables.load_session). dropped and dropped_reason are the session's
-- dropped_blocks entry for the segment's block (false and NULL when it was kept).
INSERT INTO ab_blocks (
    session_id, block, block_order, arm, position, seed, run_id, run_dir, status, error, wall_s,
    calibration_score, foreign_cpu_cores, dropped, dropped_reason, "values", higher_is_worse
)
VALUES (
    $session_id, $block, $block_order, $arm, $position, $seed, $run_id, $run_dir, $status,
    $error, $wall_s, $calibration_score, $foreign_cpu_cores, $dropped, $dropped_reason,
    CAST($values AS JSON), CAST($higher_is_worse AS JSON)
);

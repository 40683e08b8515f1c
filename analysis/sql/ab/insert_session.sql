-- Record one A/B session from its session.json (analysis.ab.warehouse_tables.load_session; the
-- session's earlier rows were deleted in the same transaction, so this never conflicts).
-- created_at is session.json's ISO text; verdicts and dropped_blocks are its lists as JSON.
INSERT INTO ab_sessions (
    session_id, created_at, mode, aa, spec_hash, machine_class, seed, margin_pct, budget_min,
    boundary, looks_blocks, status, block_s, arm_a, arm_b, repo_dirty, blocks_done, verdicts,
    dropped_blocks, session_dir, loaded_at
)
VALUES (
    $session_id, CAST($created_at AS TIMESTAMPTZ), $mode, $aa, $spec_hash, $machine_class, $seed,
    $margin_pct, $budget_min, $boundary, $looks_blocks, $status, $block_s, $arm_a, $arm_b,
    $repo_dirty, $blocks_done, CAST($verdicts AS JSON), CAST($dropped_blocks AS JSON),
    $session_dir, now()
);

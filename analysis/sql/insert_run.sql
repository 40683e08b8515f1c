-- Record one run from its manifest (the loader has already deleted any earlier row of this
-- run_id in the same transaction, so this never conflicts).
INSERT INTO runs (
    run_id, name, spec_hash, status, started_at, ended_at, manifest, run_dir, loaded_at, host
)
VALUES (
    $run_id,
    $name,
    $spec_hash,
    $status,
    CAST($started_at AS TIMESTAMPTZ),
    CAST($ended_at AS TIMESTAMPTZ),
    CAST($manifest AS JSON),
    $run_dir,
    now(),
    $host
);

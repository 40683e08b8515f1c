-- Migration 4 -> 5: runs.host (issue 21: scale-out), the host id a run ran on, so runs from
-- every host can share one warehouse. Run by analysis/warehouse/migrations.py inside one transaction,
-- together with the schema_info row that records version 5. Idempotent (IF NOT EXISTS); the
-- column is schema.sql's (last in `runs`, where ADD COLUMN puts it). Runs loaded before get the
-- manifest's `host` when it has one, else the environment probe's hostname, else NULL.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS host VARCHAR;
UPDATE runs
SET host = coalesce(
    json_extract_string(manifest, '$.host'),
    json_extract_string(manifest, '$.environment.hostname')
)
WHERE host IS NULL;

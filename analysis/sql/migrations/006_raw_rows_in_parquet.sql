-- Migration 5 -> 6: the raw rows leave the warehouse (issue 22: a warehouse at fleet scale).
-- Run by analysis/warehouse/migrations.py inside one transaction, together with the schema_info row that
-- records version 6. This file creates the file catalogue (schema.sql's `run_files`, the same
-- definition); then analysis.warehouse.registered_files.move_rows_out registers each loaded run's Parquet files
-- (or writes the rows of a run whose directory is gone beside the warehouse, in
-- `<db>.rows/<run_id>/`) and drops the raw tables, which the loader recreates as views over
-- the registered files. The stored summaries are recomputed from those files afterwards (their
-- view definitions changed with this version).
CREATE TABLE IF NOT EXISTS run_files (
    run_id VARCHAR NOT NULL,
    table_name VARCHAR NOT NULL,
    path VARCHAR NOT NULL,
    rows BIGINT NOT NULL,
    bytes BIGINT NOT NULL,
    mtime_ns BIGINT NOT NULL,
    columns VARCHAR[] NOT NULL
);

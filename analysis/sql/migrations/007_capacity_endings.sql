-- Migration 6 -> 7: the capacity search's endings and budget (capacity II): capacity_searches
-- gains stop_detail (the evidence behind the stop reason), spent_s (wall time of every probe),
-- budget_s (the time budget) and min_queries (measured queries a probe holds at least);
-- capacity_probes gains window_s (the measured window planned) and cannot_pass (stopped early
-- by the count rule without proof of a miss). Run by analysis/warehouse/migrations.py inside one
-- transaction, together with the schema_info row that records version 7. Idempotent (IF NOT
-- EXISTS); the columns are schema.sql's, last in their tables (where ADD COLUMN puts them).
-- Rows loaded before read NULL (cannot_pass false) until their search is loaded again.
ALTER TABLE capacity_searches ADD COLUMN IF NOT EXISTS stop_detail VARCHAR;
ALTER TABLE capacity_searches ADD COLUMN IF NOT EXISTS spent_s DOUBLE;
ALTER TABLE capacity_searches ADD COLUMN IF NOT EXISTS budget_s DOUBLE;
ALTER TABLE capacity_searches ADD COLUMN IF NOT EXISTS min_queries INTEGER;
ALTER TABLE capacity_probes ADD COLUMN IF NOT EXISTS window_s DOUBLE;
ALTER TABLE capacity_probes ADD COLUMN IF NOT EXISTS cannot_pass BOOLEAN DEFAULT false;

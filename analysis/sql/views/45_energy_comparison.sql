-- energy_comparison: PLACEHOLDER with the columns `contention` reads, and no rows. The energy
-- helper's real view (energy per unit of work, solo vs collocated) replaces this file.
CREATE OR REPLACE VIEW energy_comparison AS
SELECT
    CAST(NULL AS VARCHAR) AS run_id,
    CAST(NULL AS INTEGER) AS trial,
    CAST(NULL AS DOUBLE) AS energy_per_query_ratio,
    CAST(NULL AS BOOLEAN) AS work_differs,
    CAST(NULL AS VARCHAR) AS energy_source
WHERE false;

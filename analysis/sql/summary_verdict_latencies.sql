-- Every measured query's verdict latency (failures as +inf, see `query_latency`) per
-- (trial, phase, pipeline), for LoadGen's early stopping, which runs in Python
-- (analysis/reports/early_stopping.py). $trial / $phase NULL: all. In scheduled order (query id
-- breaks ties): a capacity probe splits the list into successive blocks for its bootstrap.
SELECT trial, phase, pipeline, list(verdict_ms ORDER BY scheduled_ns, query_id) AS verdict_ms
FROM query_latency
WHERE ($trial IS NULL OR trial = $trial) AND ($phase IS NULL OR phase = $phase)
GROUP BY trial, phase, pipeline;

-- latency_cdf: the points of each (trial, phase, pipeline)'s empirical latency distribution for
-- the report's CDF plot, from `query_latency` (measured queries only: warm-up excluded).
-- Every measured query is in the denominator: a query that did not complete ok has verdict_ms
-- = +inf (LoadGen's over-latency query), so the curve of a pipeline that lost queries stops
-- below 1 and the lost share stays visible. fraction = rank / queries, so the point at
-- fraction p is LoadGen's percentile sorted[floor(N * p)] read off the same order.
-- Thinned for big runs: about $points points per curve (every k-th rank, plus the last finite
-- one), which keeps the plot's shape and its tail.
WITH ranked AS (
    SELECT
        trial,
        phase,
        pipeline,
        verdict_ms,
        row_number() OVER w AS rank,
        count(*) OVER (PARTITION BY trial, phase, pipeline) AS queries,
        count(*) FILTER (WHERE isfinite(verdict_ms)) OVER (PARTITION BY trial, phase, pipeline)
            AS finite
    FROM query_latency
    WHERE run_id = $run_id
    WINDOW w AS (PARTITION BY trial, phase, pipeline ORDER BY verdict_ms, query_id)
)
SELECT trial, phase, pipeline, verdict_ms AS latency_ms, rank / queries AS fraction, queries
FROM ranked
WHERE isfinite(verdict_ms)
    AND (rank % greatest(1, queries // $points) = 0 OR rank = 1 OR rank = finite)
ORDER BY pipeline, phase, trial, rank;

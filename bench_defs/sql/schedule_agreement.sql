-- Whether two runs issued the same arrival schedule (the `reproducibility` check): each
-- query's scheduled time relative to the first arrival of its (trial, phase, pipeline), matched
-- by query id across runs $a and $b. `differing` counts arrivals present in one run only or
-- whose offsets differ by more than $tolerance nanoseconds (the clocks of two runs differ;
-- the schedule, drawn from the seed, must not).
WITH a AS (
    SELECT
        trial,
        phase,
        pipeline,
        query_id,
        scheduled_ns - min(scheduled_ns) OVER (PARTITION BY trial, phase, pipeline) AS offset_ns
    FROM queries
    WHERE run_id = $a
),
b AS (
    SELECT
        trial,
        phase,
        pipeline,
        query_id,
        scheduled_ns - min(scheduled_ns) OVER (PARTITION BY trial, phase, pipeline) AS offset_ns
    FROM queries
    WHERE run_id = $b
)
SELECT
    count(*) AS arrivals,
    count(*) FILTER (
        WHERE a.offset_ns IS NULL OR b.offset_ns IS NULL
            OR abs(a.offset_ns - b.offset_ns) > $tolerance
    ) AS differing
FROM a
FULL OUTER JOIN b USING (trial, phase, pipeline, query_id);

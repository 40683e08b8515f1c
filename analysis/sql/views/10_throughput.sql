-- throughput: completed work per (run_id, trial, phase, pipeline), warm-up excluded.
-- The window runs from the first scheduled measured query to the last completion among them,
-- so a backlog that drains late lengthens the window instead of being hidden.
-- queries_per_s and samples_per_s count only `ok` queries; dropped, errors, timeouts and
-- not_issued are reported beside them so overload stays visible. NULL rates: nothing completed.
-- Interval (ci_method 'batch_means_10'): the measured queries in order of their end
-- (completion, else issue or schedule time) are cut into 10 consecutive batches, each batch
-- spanning from the previous batch's last end (the window start for the first) to its own; the
-- batch rate is its ok queries over that span. Batches follow the end rather than the schedule
-- because offline schedules every query at one instant (a schedule span would be zero).
-- queries_per_s +- t975(9) * stddev(batch rates) / sqrt(10), the low end at least 0 (a trace of
-- a few bursty requests can put the symmetric interval below it); NULL when there are fewer than 10
-- batches or a batch spans no time. queries_per_s_se is that standard error (for contention).
CREATE OR REPLACE VIEW throughput_from_rows AS
WITH measured AS (
    SELECT *, coalesce(completed_ns, issued_ns, scheduled_ns) AS end_ns
    FROM queries
    WHERE NOT warmup
),
counted AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        count(*) AS queries,
        count(*) FILTER (WHERE status = 'ok') AS ok_queries,
        CAST(coalesce(sum(samples) FILTER (WHERE status = 'ok'), 0) AS BIGINT) AS ok_samples,
        count(*) FILTER (WHERE status = 'dropped') AS dropped,
        count(*) FILTER (WHERE status = 'error') AS errors,
        count(*) FILTER (WHERE status = 'timeout') AS timeouts,
        count(*) FILTER (WHERE status = 'not_issued') AS not_issued,
        min(scheduled_ns) AS window_start_ns,
        max(completed_ns) AS window_end_ns
    FROM measured
    GROUP BY run_id, trial, phase, pipeline
),
-- Each group's measured queries in order of their end (query id breaks ties), cut into
-- batches (batch_slice: ntile's cut); a batch ends at its last query's end.
ordered AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        list({'end_ns': end_ns, 'ok': status = 'ok'} ORDER BY end_ns, query_id) AS ends
    FROM measured
    GROUP BY run_id, trial, phase, pipeline
),
batches AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        b + 1 AS batch,
        len(batch_slice(ends, b)) AS size,
        len(list_filter(batch_slice(ends, b), lambda q: q.ok)) AS ok_queries,
        batch_slice(ends, b)[-1].end_ns AS batch_end_ns
    FROM (SELECT *, unnest(range(batch_count(ends))) AS b FROM ordered)
),
batch_rates AS (
    SELECT
        b.run_id,
        b.trial,
        b.phase,
        b.pipeline,
        b.batch,
        b.size,
        b.ok_queries / nullif(
            (b.batch_end_ns - coalesce(
                lag(b.batch_end_ns) OVER (
                    PARTITION BY b.run_id, b.trial, b.phase, b.pipeline ORDER BY b.batch
                ),
                c.window_start_ns
            )) / 1e9,
            0
        ) AS rate
    FROM batches AS b
    JOIN counted AS c USING (run_id, trial, phase, pipeline)
),
spread AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        batch_se(
            stddev_samp(rate ORDER BY batch),
            count(*),
            min(size),
            2,
            count(*) = count(rate) AND bool_and(isfinite(rate))
        ) AS rate_se
    FROM batch_rates
    GROUP BY run_id, trial, phase, pipeline
),
rates AS (
    SELECT
        c.*,
        (c.window_end_ns - c.window_start_ns) / 1e9 AS window_s,
        c.ok_queries / nullif((c.window_end_ns - c.window_start_ns) / 1e9, 0) AS queries_per_s,
        c.ok_samples / nullif((c.window_end_ns - c.window_start_ns) / 1e9, 0) AS samples_per_s,
        s.rate_se
    FROM counted AS c
    JOIN spread AS s USING (run_id, trial, phase, pipeline)
)
SELECT
    run_id,
    trial,
    phase,
    pipeline,
    queries,
    ok_queries,
    ok_samples,
    dropped,
    errors,
    timeouts,
    not_issued,
    window_start_ns,
    window_end_ns,
    window_s,
    queries_per_s,
    samples_per_s,
    CASE WHEN queries_per_s IS NOT NULL THEN rate_se END AS queries_per_s_se,
    -- A rate is never negative: with few, bursty queries the t interval can reach below 0.
    -- (greatest() would skip a NULL: the CASE keeps an unknown interval NULL.)
    CASE
        WHEN queries_per_s - t975(ci_batches() - 1) * rate_se IS NOT NULL
            THEN greatest(0.0, queries_per_s - t975(ci_batches() - 1) * rate_se)
    END AS queries_per_s_ci_low,
    queries_per_s + t975(ci_batches() - 1) * rate_se AS queries_per_s_ci_high,
    CASE
        WHEN queries_per_s IS NOT NULL AND rate_se IS NOT NULL THEN 'batch_means_10'
    END AS ci_method
FROM rates;

-- Stored once per run at load (analysis/warehouse/stored_summaries.py), so reading `throughput` scans a few rows
-- per run however many events the warehouse holds; `throughput_from_rows` is the definition.
CREATE TABLE IF NOT EXISTS summary_throughput AS SELECT * FROM throughput_from_rows LIMIT 0;
CREATE OR REPLACE VIEW throughput AS SELECT * FROM summary_throughput;

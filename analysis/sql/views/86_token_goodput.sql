-- token_goodput: the share and the rate of measured queries that met the pipeline's token
-- SLOs (loadgen.ttft_slo_ms, loadgen.tpot_slo_ms, read from `pipeline_specs`), per (run_id,
-- trial, phase, pipeline, stage) for every stage that generates tokens: a stage with at least
-- one visit in the run (any trial or phase, warm-up or failed included) that recorded
-- first_token_ns, so a phase in which its server answered nothing still has a row (goodput 0).
-- The served-LLM
-- counterpart of `goodput` (whose rules it follows): the denominator is every measured query
-- of the pipeline, whatever became of it (ok, error, dropped, timeout, not_issued), so a
-- failure is never good. A query is good when it completed ok, the stage answered it (an ok
-- visit with first_token_ns and tokens), and each SLO that is set holds:
--   TTFT  first_token_ns - scheduled_ns (the `tokens` view's ttft: from the scheduled
--         arrival, so queueing and upstream stages count) <= ttft_slo_ms;
--   TPOT  (finished_ns - first_token_ns) / (tokens - 1) <= tpot_slo_ms; a one-token answer
--         has no decoding time and meets any TPOT bound (vLLM's bench serve counts it 0).
-- A query that visits the stage several times (a loop) is judged on its first token (the
-- earliest first_token_ns of its ok visits) and its slowest visit's TPOT; its tokens are
-- those of every ok visit.
--   ttft_slo_ms, tpot_slo_ms  the bounds; NULL when unset. With neither set, every figure
--                     below except queries, ok_queries, failed_queries and window_s is NULL
--                     (nothing defines "good");
--   queries           measured queries of the pipeline (the denominator); ok_queries,
--                     failed_queries beside it;
--   good_queries      queries meeting every set bound; good_tokens their tokens;
--   goodput_share     good_queries / queries, with a Wilson score 95% interval (ci_method
--                     'wilson_95', z = 1.96; queries taken as independent draws, optimistic
--                     under queueing, as in `goodput`);
--   goodput_per_s     good_queries / the throughput window (`throughput.window_s`: first
--                     scheduled measured query to last completion);
--   good_tokens_per_s good_tokens / the same window: the output tokens/s that met the SLOs
--                     (beside `tokens.tokens_per_s`, every output token/s).
-- Known limit: a stage none of whose visits in the whole run produced a first token (a server
-- down from the start) is not recognised as a generating stage, so it has no row here;
-- `goodput` and `throughput` still count those queries as failed.
CREATE OR REPLACE VIEW token_goodput_from_rows AS
WITH token_stages AS (
    SELECT DISTINCT run_id, pipeline, stage
    FROM stage_events
    WHERE first_token_ns IS NOT NULL
),
answered AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        stage,
        query_id,
        min(first_token_ns) AS first_token_ns,
        max(tpot_ms(finished_ns, first_token_ns, tokens)) AS tpot_ms,
        sum(tokens) AS tokens
    FROM stage_events
    WHERE token_visit(status, first_token_ns, tokens)
    GROUP BY run_id, trial, phase, pipeline, stage, query_id
),
judged AS (
    SELECT
        s.run_id,
        q.trial,
        q.phase,
        s.pipeline,
        s.stage,
        q.status,
        a.tokens,
        p.ttft_slo_ms,
        p.tpot_slo_ms,
        q.status = 'ok'
        AND a.first_token_ns IS NOT NULL
        AND (p.ttft_slo_ms IS NULL OR (a.first_token_ns - q.scheduled_ns) / 1e6 <= p.ttft_slo_ms)
        AND (p.tpot_slo_ms IS NULL OR coalesce(a.tpot_ms, 0) <= p.tpot_slo_ms) AS good
    FROM token_stages AS s
    JOIN query_latency AS q
        ON s.run_id = q.run_id
        AND s.pipeline IS NOT DISTINCT FROM q.pipeline
    LEFT JOIN answered AS a
        ON s.run_id = a.run_id
        AND q.trial = a.trial
        AND q.phase = a.phase
        AND s.pipeline IS NOT DISTINCT FROM a.pipeline
        AND s.stage = a.stage
        AND q.query_id = a.query_id
    LEFT JOIN pipeline_specs AS p ON s.run_id = p.run_id AND s.pipeline = p.pipeline
),
counted AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        stage,
        any_value(ttft_slo_ms) AS ttft_slo_ms,
        any_value(tpot_slo_ms) AS tpot_slo_ms,
        count(*) AS queries,
        count(*) FILTER (WHERE status = 'ok') AS ok_queries,
        count(*) FILTER (WHERE status <> 'ok') AS failed_queries,
        count(*) FILTER (WHERE good) AS good_queries,
        coalesce(sum(tokens) FILTER (WHERE good), 0) AS good_tokens
    FROM judged
    GROUP BY run_id, trial, phase, pipeline, stage
),
shares AS (
    SELECT
        *,
        ttft_slo_ms IS NOT NULL OR tpot_slo_ms IS NOT NULL AS has_slo,
        CASE
            WHEN ttft_slo_ms IS NOT NULL OR tpot_slo_ms IS NOT NULL
                THEN good_queries / queries::DOUBLE
        END AS p
    FROM counted
)
SELECT
    s.run_id,
    s.trial,
    s.phase,
    s.pipeline,
    s.stage,
    s.ttft_slo_ms,
    s.tpot_slo_ms,
    s.queries,
    s.ok_queries,
    s.failed_queries,
    CASE WHEN s.has_slo THEN s.good_queries END AS good_queries,
    CASE WHEN s.has_slo THEN CAST(s.good_tokens AS BIGINT) END AS good_tokens,
    s.p AS goodput_share,
    wilson95(s.p, s.queries, -1) AS goodput_share_ci_low,
    wilson95(s.p, s.queries, 1) AS goodput_share_ci_high,
    CASE WHEN s.p IS NOT NULL THEN 'wilson_95' END AS ci_method,
    t.window_s,
    CASE WHEN s.has_slo THEN s.good_queries / nullif(t.window_s, 0) END AS goodput_per_s,
    CASE WHEN s.has_slo THEN s.good_tokens / nullif(t.window_s, 0) END AS good_tokens_per_s
FROM shares AS s
LEFT JOIN throughput AS t
    ON s.run_id = t.run_id
    AND s.trial = t.trial
    AND s.phase = t.phase
    AND s.pipeline IS NOT DISTINCT FROM t.pipeline;

-- Stored once per run at load (analysis/warehouse/stored_summaries.py), so reading `token_goodput` scans a few
-- rows per run however many events the warehouse holds; `token_goodput_from_rows` is the
-- definition.
-- The loader skips this summary for runs without a visit with a first token (it would be empty):
-- empty unless: SELECT count(*) > 0 FROM stage_events WHERE first_token_ns IS NOT NULL
CREATE TABLE IF NOT EXISTS summary_token_goodput AS SELECT * FROM token_goodput_from_rows LIMIT 0;
CREATE OR REPLACE VIEW token_goodput AS SELECT * FROM summary_token_goodput;

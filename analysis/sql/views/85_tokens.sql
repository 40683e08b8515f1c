-- tokens: token timings of generation stages (transformers.generate, http.openai), per
-- (run_id, trial, phase, pipeline, stage). Rows: the ok stage events that recorded
-- first_token_ns and tokens, of measured queries only (inner join on the query id to a
-- non-warm-up `queries` row: warm-up queries are left out, and only the window's scheduled
-- arrivals have rows). A query that
-- visits the stage several times (a loop) contributes every visit. Percentiles are LoadGen's
-- (macro loadgen_quantiles: sorted[floor(N * p)], an observed value).
--   ttft_p*_ms        time to first token AS A USER SEES IT: first_token_ns - scheduled_ns, from
--                     the query's scheduled arrival, so issue delay, queueing and upstream stages
--                     count (no coordinated omission in open loop).
--   stage_ttft_p*_ms  the stage's own time to first token: first_token_ns - started_ns (the
--                     prefill pass of the model, without waiting).
--   tpot_*_ms         time per output token after the first: (finished_ns - first_token_ns) /
--                     (tokens - 1), over events with tokens > 1. For a batched query, `tokens`
--                     counts the new tokens of every sequence, so TPOT is the time per token of
--                     the batch (a decoding step's time / batch size). TPOT is the MEAN
--                     inter-token latency of a visit; tpot_p99_ms is the p99 over visits of
--                     that mean, not a p99 of single token gaps (that is itl_p99_ms).
--   itl_p*_ms         inter-token latency: the gaps between consecutive chunks of a streamed
--                     answer, from `token_events` (one row per chunk's arrival, written by
--                     streaming stages such as http.openai): within one visit, the ts_ns of
--                     each row minus that of the row before it in token_index order, over
--                     every gap of the rows' visits (the same population: ok visits of
--                     measured queries), LoadGen's percentile over all gaps pooled, so a long
--                     answer weighs more than a short one (as vLLM's bench serve reports ITL).
--                     itl_gaps counts them.
--                     NULL (itl_gaps 0) when the stage wrote no token_events (a generation
--                     stage inside the pipeline records only first_token_ns and tokens).
--   tokens_per_s      new tokens of the measured events / the pipeline's throughput window
--                     (`throughput.window_s`: first scheduled measured query to last completion),
--                     so it reads beside queries_per_s.
-- Named `generation` before issue 10; that name is dropped here so an existing warehouse does
-- not keep a stale copy of the old definition (one definition per fact).
DROP VIEW IF EXISTS generation;

CREATE OR REPLACE VIEW tokens_from_rows AS
WITH events AS (
    SELECT
        e.run_id,
        e.trial,
        e.phase,
        e.pipeline,
        e.stage,
        e.query_id,
        e.visit,
        e.tokens,
        (e.first_token_ns - q.scheduled_ns) / 1e6 AS ttft_ms,
        (e.first_token_ns - e.started_ns) / 1e6 AS stage_ttft_ms,
        tpot_ms(e.finished_ns, e.first_token_ns, e.tokens) AS tpot_ms
    FROM stage_events AS e
    JOIN queries AS q
        ON e.run_id = q.run_id
        AND e.trial = q.trial
        AND e.phase = q.phase
        AND e.pipeline IS NOT DISTINCT FROM q.pipeline
        AND e.query_id = q.query_id
    WHERE NOT q.warmup
        AND token_visit(e.status, e.first_token_ns, e.tokens)
),
-- One row per gap between consecutive chunks of a visit counted above (the inner join keeps
-- the population of `events`: ok visits of measured queries).
gaps AS (
    SELECT
        k.run_id,
        k.trial,
        k.phase,
        k.pipeline,
        k.stage,
        (k.ts_ns - lag(k.ts_ns) OVER visit) / 1e6 AS itl_ms
    FROM token_events AS k
    JOIN events AS e
        ON k.run_id = e.run_id
        AND k.trial = e.trial
        AND k.phase = e.phase
        AND k.pipeline IS NOT DISTINCT FROM e.pipeline
        AND k.query_id = e.query_id
        AND k.stage = e.stage
        AND k.visit = e.visit
    WINDOW visit AS (
        PARTITION BY k.run_id, k.trial, k.phase, k.pipeline, k.query_id, k.stage, k.visit
        ORDER BY k.token_index
    )
),
itl AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        stage,
        count(*) AS itl_gaps,
        loadgen_quantiles(itl_ms, [0.5, 0.99]) AS itl
    FROM gaps
    WHERE itl_ms IS NOT NULL  -- the first chunk of a visit has no gap before it
    GROUP BY run_id, trial, phase, pipeline, stage
),
summary AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        stage,
        count(DISTINCT query_id) AS queries,
        count(*) AS generations,
        CAST(sum(tokens) AS BIGINT) AS tokens,
        avg(tokens) AS tokens_mean,
        loadgen_quantiles(ttft_ms, [0.5, 0.9, 0.99]) AS ttft,
        loadgen_quantiles(stage_ttft_ms, [0.5, 0.9, 0.99]) AS stage_ttft,
        avg(tpot_ms) AS tpot_mean_ms,
        loadgen_quantiles(tpot_ms, [0.5, 0.99]) AS tpot
    FROM events
    GROUP BY run_id, trial, phase, pipeline, stage
)
SELECT
    s.run_id,
    s.trial,
    s.phase,
    s.pipeline,
    s.stage,
    s.queries,
    s.generations,
    s.tokens,
    s.tokens_mean,
    s.ttft[1] AS ttft_p50_ms,
    s.ttft[2] AS ttft_p90_ms,
    s.ttft[3] AS ttft_p99_ms,
    s.stage_ttft[1] AS stage_ttft_p50_ms,
    s.stage_ttft[2] AS stage_ttft_p90_ms,
    s.stage_ttft[3] AS stage_ttft_p99_ms,
    s.tpot_mean_ms,
    s.tpot[1] AS tpot_p50_ms,
    s.tpot[2] AS tpot_p99_ms,
    coalesce(i.itl_gaps, 0) AS itl_gaps,
    i.itl[1] AS itl_p50_ms,
    i.itl[2] AS itl_p99_ms,
    t.window_s,
    s.tokens / nullif(t.window_s, 0) AS tokens_per_s
FROM summary AS s
LEFT JOIN itl AS i
    ON s.run_id = i.run_id
    AND s.trial = i.trial
    AND s.phase = i.phase
    AND s.pipeline IS NOT DISTINCT FROM i.pipeline
    AND s.stage = i.stage
LEFT JOIN throughput AS t
    ON s.run_id = t.run_id
    AND s.trial = t.trial
    AND s.phase = t.phase
    AND s.pipeline IS NOT DISTINCT FROM t.pipeline;

-- Stored once per run at load (analysis/warehouse/stored_summaries.py), so reading `tokens` scans a few rows
-- per run however many events the warehouse holds; `tokens_from_rows` is the definition.
-- The loader skips this summary for runs without a visit with a first token (it would be empty):
-- empty unless: SELECT count(*) > 0 FROM stage_events WHERE first_token_ns IS NOT NULL
CREATE TABLE IF NOT EXISTS summary_tokens AS SELECT * FROM tokens_from_rows LIMIT 0;
CREATE OR REPLACE VIEW tokens AS SELECT * FROM summary_tokens;

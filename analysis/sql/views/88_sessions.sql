-- sessions: multi-turn conversations (`http.openai` sending a payload's `turns`, built by
-- dataset.synthetic_prompts with `session`), one row per (run_id, trial, phase, pipeline,
-- stage, turn) over `session_turns` rows of measured queries (inner join on a non-warm-up
-- `queries` row; a failed session's completed turns count). Percentiles are LoadGen's
-- (loadgen_quantiles: sorted[floor(N * p)]).
--   sessions             sessions that reached this turn
--   ttft_p*_ms           the turn's time to first token: first_token_ns - sent_ns (from its
--                        request, sent after the user's think time; the turn's queueing at
--                        the server counts, the think time does not)
--   tpot_mean_ms         the turn's (finished - first token) / (tokens - 1), averaged over its
--                        requests with tokens > 1 (per-request inter-token latency)
--   turn_p50_ms          the turn's request latency: finished_ns - sent_ns, p50
--   prompt_tokens_mean   the server's usage.prompt_tokens: the whole history the turn carried,
--                        so it grows turn by turn (a prefix cache can reuse the earlier turns)
--   tokens_mean          the turn's answer, in the server's tokens
-- A session is one query: its duration (first turn sent after its scheduled arrival, to the
-- last answer, think times included) is the `latency` view's figure for the pipeline.
CREATE OR REPLACE VIEW sessions AS
WITH turns AS (
    SELECT
        t.run_id,
        t.trial,
        t.phase,
        t.pipeline,
        t.stage,
        t.turn,
        (t.first_token_ns - t.sent_ns) / 1e6 AS ttft_ms,
        (t.finished_ns - t.sent_ns) / 1e6 AS turn_ms,
        tpot_ms(t.finished_ns, t.first_token_ns, t.tokens) AS tpot_ms,
        t.prompt_tokens,
        t.tokens
    FROM session_turns AS t
    JOIN queries AS q
        ON t.run_id = q.run_id
        AND t.trial = q.trial
        AND t.phase = q.phase
        AND t.pipeline IS NOT DISTINCT FROM q.pipeline
        AND t.query_id = q.query_id
    WHERE NOT q.warmup
),
summary AS (
    SELECT
        run_id,
        trial,
        phase,
        pipeline,
        stage,
        turn,
        count(*) AS sessions,
        loadgen_quantiles(ttft_ms, [0.5, 0.99]) AS ttft,
        avg(tpot_ms) AS tpot_mean_ms,
        loadgen_quantiles(turn_ms, [0.5]) AS turn_latency,
        avg(prompt_tokens) AS prompt_tokens_mean,
        avg(tokens) AS tokens_mean
    FROM turns
    GROUP BY run_id, trial, phase, pipeline, stage, turn
)
SELECT
    run_id,
    trial,
    phase,
    pipeline,
    stage,
    turn,
    sessions,
    ttft[1] AS ttft_p50_ms,
    ttft[2] AS ttft_p99_ms,
    tpot_mean_ms,
    turn_latency[1] AS turn_p50_ms,
    prompt_tokens_mean,
    tokens_mean
FROM summary;

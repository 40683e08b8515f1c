-- client_truth.py's collobench figures of one run ($run_id), read from the views a user reads
-- after `collobench run` (tokens, latency, stage_breakdown), for the `http.openai` stage `llm`:
--   ttft_p50_ms        first token - the query's scheduled arrival (closed loop: the previous
--                      completion), issue delay included
--   stage_ttft_p50_ms  first token - the stage's start of the visit (the request's start, as
--                      AIPerf's TTFT)
--   itl_p50_ms         every gap between consecutive chunks, pooled
--   tpot_p50_ms        per request (finished - first token) / (tokens - 1), as AIPerf's ITL
--   service_p50_ms     the visit's finish - its start (the request's start to the stream's
--                      end, as AIPerf's request latency)
--   from_issue_p50_ms  completion - issue of the query; latency_p50_ms: from the schedule
SELECT
    t.queries,
    t.ttft_p50_ms,
    t.stage_ttft_p50_ms,
    t.itl_p50_ms,
    t.tpot_p50_ms,
    b.service_p50_ms,
    l.from_issue_p50_ms,
    l.latency_p50_ms
FROM tokens AS t
JOIN latency AS l
    ON t.run_id = l.run_id
    AND t.trial = l.trial
    AND t.phase = l.phase
    AND t.pipeline = l.pipeline
JOIN stage_breakdown AS b
    ON t.run_id = b.run_id
    AND t.trial = b.trial
    AND t.phase = b.phase
    AND t.pipeline = b.pipeline
    AND t.stage = b.stage
WHERE t.run_id = $run_id AND t.stage = 'llm';

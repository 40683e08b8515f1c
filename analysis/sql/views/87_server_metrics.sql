-- server_metric_names: THE mapping of inference servers' Prometheus names to common figures (the
-- one place it lives; `server_metrics` reads it; query it to see what is mapped). Columns:
--   server   vllm | sglang | tgi
--   metric   the series name as exposed (a prometheus_client Counter `x` is exposed `x_total`)
--   figure   requests_running | requests_waiting | kv_cache_usage (fraction 0..1 of the KV
--            cache in use) | prefix_cache_hit_rate (fraction 0..1) | batch_size (sequences
--            in the running batch) | prefix_cache_hits | prefix_cache_queries (counters: the
--            hit rate is their increments' ratio between two scrapes)
--   combine  how the series of one scrape (several label sets: models, engines, ranks) make
--            one value: sum (counts) | avg (fractions)
-- Sources (names as the servers expose them):
--   vLLM docs/design/metrics.md and vllm/v1/metrics/loggers.py: vllm:num_requests_running,
--     vllm:num_requests_waiting, vllm:kv_cache_usage_perc (v1; a fraction "1 = 100%" despite
--     the name), vllm:gpu_cache_usage_perc (v0), vllm:gpu_prefix_cache_hit_rate (v0 gauge),
--     vllm:prefix_cache_queries / vllm:prefix_cache_hits (v1 counters, in blocks).
--   SGLang python/sglang/srt/metrics/collector.py: sglang:num_running_reqs,
--     sglang:num_queue_reqs, sglang:token_usage (KV pool tokens in use / capacity),
--     sglang:cache_hit_rate (prefix cache, a fraction).
--   TGI docs/source/reference/metrics.md: tgi_queue_size (waiting), tgi_batch_current_size
--     (the running batch: it is both TGI's running requests and its batch size).
--   kubernetes-sigs/inference-perf's model-server metrics map the same names to queue length,
--   running requests and KV-cache use. vLLM and SGLang expose no batch-size gauge: their running
--   requests are the batch (batch_size NULL; read requests_running).
CREATE OR REPLACE VIEW server_metric_names AS
SELECT *
FROM (
    VALUES
        ('vllm', 'vllm:num_requests_running', 'requests_running', 'sum'),
        ('vllm', 'vllm:num_requests_waiting', 'requests_waiting', 'sum'),
        ('vllm', 'vllm:kv_cache_usage_perc', 'kv_cache_usage', 'avg'),
        ('vllm', 'vllm:gpu_cache_usage_perc', 'kv_cache_usage', 'avg'),
        ('vllm', 'vllm:gpu_prefix_cache_hit_rate', 'prefix_cache_hit_rate', 'avg'),
        ('vllm', 'vllm:prefix_cache_hits_total', 'prefix_cache_hits', 'sum'),
        ('vllm', 'vllm:prefix_cache_queries_total', 'prefix_cache_queries', 'sum'),
        ('sglang', 'sglang:num_running_reqs', 'requests_running', 'sum'),
        ('sglang', 'sglang:num_queue_reqs', 'requests_waiting', 'sum'),
        ('sglang', 'sglang:token_usage', 'kv_cache_usage', 'avg'),
        ('sglang', 'sglang:cache_hit_rate', 'prefix_cache_hit_rate', 'avg'),
        ('tgi', 'tgi_batch_current_size', 'requests_running', 'sum'),
        ('tgi', 'tgi_batch_current_size', 'batch_size', 'sum'),
        ('tgi', 'tgi_queue_size', 'requests_waiting', 'sum')
) AS names (server, metric, figure, combine);

-- server_metrics: one row per scrape of a service's metrics endpoint (`server_samples`, whose
-- `up` row every scrape writes), the mapped figures side by side, aligned with what the client
-- saw over the same stretch of time. Per (run_id, trial, phase, service, ts_ns):
--   up                    the scrape worked; false: a gap (scrape_error says why, figures NULL)
--   server                which server's names matched (vllm | sglang | tgi; NULL: none)
--   requests_running, requests_waiting, kv_cache_usage, batch_size   the mapped gauges
--   prefix_cache_hit_rate the server's own gauge, else (vLLM v1) the counters' increments since
--                         the previous successful scrape: hits / queries (NULL without queries)
--   in_window             ts_ns inside one of the phase's load windows (`load_windows`)
--   client_completed      measured ok queries of the phase (every pipeline) that completed
--                         after the previous scrape and up to this one (`query_latency`)
--   client_latency_p50_ms, client_latency_max_ms   their latency from the scheduled arrival
-- A first scrape has no previous one: client_completed 0. Empty unless a service had `metrics`.
CREATE OR REPLACE VIEW server_metrics AS
WITH scrapes AS (
    SELECT
        run_id,
        trial,
        phase,
        service,
        ts_ns,
        value = 1 AS up,
        labels ->> '$.error' AS scrape_error,
        lag(ts_ns) OVER (PARTITION BY run_id, trial, phase, service ORDER BY ts_ns) AS previous_ns
    FROM server_samples
    WHERE metric = 'up'
),
mapped AS (
    SELECT s.run_id, s.trial, s.phase, s.service, s.ts_ns, n.server, n.figure,
        CASE WHEN n.combine = 'sum' THEN sum(s.value) ELSE avg(s.value) END AS value
    FROM server_samples AS s
    JOIN server_metric_names AS n ON s.metric = n.metric
    GROUP BY s.run_id, s.trial, s.phase, s.service, s.ts_ns, n.server, n.figure, n.combine
),
figures AS (
    SELECT
        run_id, trial, phase, service, ts_ns,
        max(server) AS server,
        max(value) FILTER (WHERE figure = 'requests_running') AS requests_running,
        max(value) FILTER (WHERE figure = 'requests_waiting') AS requests_waiting,
        max(value) FILTER (WHERE figure = 'kv_cache_usage') AS kv_cache_usage,
        max(value) FILTER (WHERE figure = 'prefix_cache_hit_rate') AS hit_rate_gauge,
        max(value) FILTER (WHERE figure = 'batch_size') AS batch_size,
        max(value) FILTER (WHERE figure = 'prefix_cache_hits') AS hits,
        max(value) FILTER (WHERE figure = 'prefix_cache_queries') AS queries
    FROM mapped
    GROUP BY run_id, trial, phase, service, ts_ns
),
rates AS (
    SELECT
        *,
        hits - lag(hits) OVER scrape_order AS new_hits,
        queries - lag(queries) OVER scrape_order AS new_queries
    FROM figures
    WINDOW scrape_order AS (PARTITION BY run_id, trial, phase, service ORDER BY ts_ns)
),
client AS (
    SELECT
        s.run_id, s.trial, s.phase, s.service, s.ts_ns,
        count(q.completed_ms) AS client_completed,
        median(q.completed_ms) AS client_latency_p50_ms,
        max(q.completed_ms) AS client_latency_max_ms
    FROM scrapes AS s
    LEFT JOIN query_latency AS q
        ON q.run_id = s.run_id AND q.trial = s.trial AND q.phase = s.phase
        AND q.completed_ms IS NOT NULL
        AND q.scheduled_ns + q.completed_ms * 1e6 > s.previous_ns
        AND q.scheduled_ns + q.completed_ms * 1e6 <= s.ts_ns
    GROUP BY s.run_id, s.trial, s.phase, s.service, s.ts_ns
)
SELECT
    s.run_id,
    s.trial,
    s.phase,
    s.service,
    s.ts_ns,
    s.up,
    s.scrape_error,
    r.server,
    r.requests_running,
    r.requests_waiting,
    r.kv_cache_usage,
    coalesce(
        r.hit_rate_gauge, CASE WHEN r.new_queries > 0 THEN r.new_hits / r.new_queries END
    ) AS prefix_cache_hit_rate,
    r.batch_size,
    EXISTS (
        SELECT 1 FROM load_windows AS w
        WHERE w.run_id = s.run_id AND w.trial = s.trial AND w.phase = s.phase
            AND s.ts_ns BETWEEN w.window_start_ns AND w.window_end_ns
    ) AS in_window,
    c.client_completed,
    c.client_latency_p50_ms,
    c.client_latency_max_ms
FROM scrapes AS s
LEFT JOIN rates AS r USING (run_id, trial, phase, service, ts_ns)
LEFT JOIN client AS c USING (run_id, trial, phase, service, ts_ns);

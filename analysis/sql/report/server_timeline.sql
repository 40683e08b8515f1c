-- server_timeline: a run's scrapes of its services' metrics endpoints (view `server_metrics`:
-- vLLM, SGLang and TGI names mapped to common figures), for the server panels under the
-- report's timeline plot, beside the client's latency over the same stretch (median latency
-- of the queries completed since the previous scrape). t_s counts seconds from $origin_ns; a
-- failed scrape (up false) has NULL figures, so the lines break at a gap.
SELECT
    trial,
    phase,
    service,
    (ts_ns - $origin_ns) / 1e9 AS t_s,
    up,
    requests_running,
    requests_waiting,
    batch_size,
    kv_cache_usage * 100 AS kv_cache_usage_pct,
    prefix_cache_hit_rate * 100 AS prefix_cache_hit_rate_pct,
    client_latency_p50_ms
FROM server_metrics
WHERE run_id = $run_id
ORDER BY service, trial, phase, t_s;

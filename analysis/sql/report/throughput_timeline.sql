-- throughput_timeline: completions of measured (non-warm-up) ok queries per time bin, per
-- (trial, phase, pipeline), for the report's timeline plot. t_s is the bin's start in seconds
-- from $origin_ns (the run's first recorded instant, so the plot's axes share one origin);
-- queries_per_s = completions in the bin / $bin_s. Bins without completions are absent.
SELECT
    trial,
    phase,
    pipeline,
    floor((completed_ns - $origin_ns) / 1e9 / $bin_s) * $bin_s AS t_s,
    count(*) / $bin_s AS queries_per_s
FROM queries
WHERE run_id = $run_id AND NOT warmup AND status = 'ok' AND completed_ns IS NOT NULL
GROUP BY ALL
ORDER BY pipeline, phase, trial, t_s;

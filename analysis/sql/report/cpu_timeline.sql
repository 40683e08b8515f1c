-- cpu_timeline: CPU use over time, for the report's timeline plot: the host-wide figure
-- (scope 'host', percent of all cores) and each pipeline's worker process (scope 'process',
-- percent of one core), as host_samples recorded them. t_s counts seconds from $origin_ns.
SELECT
    trial,
    phase,
    CASE WHEN scope = 'host' THEN 'host (% of all cores)' ELSE pipeline || ' (% of a core)' END
        AS series,
    (ts_ns - $origin_ns) / 1e9 AS t_s,
    cpu_util
FROM host_samples
WHERE run_id = $run_id AND cpu_util IS NOT NULL AND scope IN ('host', 'process')
ORDER BY series, t_s;

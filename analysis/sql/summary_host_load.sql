-- Load windows of one phase of one trial whose foreign CPU load crossed host_load's warning
-- threshold: the launcher turns each row into a manifest warning (analysis/reports/headline_figures.py).
SELECT
    pipeline,
    host_cpu_cores,
    workers_cpu_cores,
    harness_cpu_cores,
    services_cpu_cores,
    foreign_cpu_cores
FROM host_load
WHERE trial = $trial AND phase = $phase AND foreign_cpu_warning
ORDER BY pipeline;
